package topology

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// RuntimeConfigVersion is the version of the runtime_config format this
// package writes and reads.
const RuntimeConfigVersion = 1

// RuntimeConfig is the JSON form of a queue set that the Terraform resource
// queuey_queue_set exposes as its computed runtime_config attribute and the
// runtime reads (queuey.ParseQueueSet, queuey.LoadQueueSet), so that a set is
// written once, in HCL. It holds what the broker's queues are declared with;
// per-process settings (prefetch, retry policies) are not part of it.
type RuntimeConfig struct {
	// Version is RuntimeConfigVersion.
	Version int `json:"version"`
	// Vhost is the virtual host the set lives in. The runtime takes its
	// virtual host from the AMQP URL; this says which one to use.
	Vhost string `json:"vhost"`
	// Prefix is the set's prefix.
	Prefix string `json:"prefix"`
	// Queues are the logical queues, sorted by name.
	Queues []RuntimeQueue `json:"queues"`
}

// RuntimeQueue is one queue of a RuntimeConfig, its defaults resolved.
type RuntimeQueue struct {
	Name string `json:"name"`
	// WorkQueue and DeadQueue are the broker names, for readers that do
	// not compute them.
	WorkQueue string `json:"work_queue"`
	DeadQueue string `json:"dead_queue"`
	// MaxPriority is x-max-priority; 0 means not a priority queue.
	MaxPriority int `json:"max_priority"`
	// MessageTTLMs is x-message-ttl in milliseconds; 0 means none.
	MessageTTLMs int64 `json:"message_ttl_ms"`
	Durable      bool  `json:"durable"`
	// QueueType is QuorumQueueType for a quorum queue, left out for a
	// classic one, so that a classic set's config reads as it did before
	// queue types.
	QueueType string `json:"queue_type,omitempty"`
}

// NewRuntimeConfig is the runtime config of s in vhost.
func NewRuntimeConfig(vhost string, s Set) RuntimeConfig {
	c := RuntimeConfig{Version: RuntimeConfigVersion, Vhost: vhost, Prefix: s.Prefix, Queues: make([]RuntimeQueue, len(s.Queues))}
	for i, q := range s.Queues {
		work := WorkName(s.Prefix, q.Name)
		c.Queues[i] = RuntimeQueue{Name: q.Name, WorkQueue: work, DeadQueue: DeadName(work), MaxPriority: q.MaxPriority, MessageTTLMs: q.MessageTTL.Milliseconds(), Durable: q.Durable}
		if q.Quorum() {
			c.Queues[i].QueueType = QuorumQueueType
		}
	}
	return c
}

// Set is the queue set c describes.
func (c RuntimeConfig) Set() Set {
	s := Set{Prefix: c.Prefix, Queues: make([]Queue, len(c.Queues))}
	for i, q := range c.Queues {
		s.Queues[i] = Queue{Name: q.Name, MaxPriority: q.MaxPriority, MessageTTL: time.Duration(q.MessageTTLMs) * time.Millisecond, Durable: q.Durable}
		if q.QueueType != DefaultQueueType {
			s.Queues[i].Type = q.QueueType
		}
	}
	return s
}

// ParseRuntimeConfig decodes and checks a runtime config: its version, its
// names (Validate), and that the broker names it states are the ones the
// names give.
func ParseRuntimeConfig(data []byte) (RuntimeConfig, error) {
	var c RuntimeConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return RuntimeConfig{}, fmt.Errorf("runtime config is not JSON in the format of the queuey_queue_set resource's runtime_config attribute: %w", err)
	}
	switch {
	case c.Version == 0:
		return RuntimeConfig{}, errors.New("runtime config has no version: pass the queuey_queue_set resource's runtime_config attribute as it is")
	case c.Version > RuntimeConfigVersion:
		return RuntimeConfig{}, fmt.Errorf("runtime config has version %d, newer than the %d this runtime reads: upgrade the runtime, or the provider that wrote it is ahead of it", c.Version, RuntimeConfigVersion)
	}
	for _, q := range c.Queues {
		work := WorkName(c.Prefix, q.Name)
		if q.WorkQueue != "" && q.WorkQueue != work || q.DeadQueue != "" && q.DeadQueue != DeadName(work) {
			return RuntimeConfig{}, fmt.Errorf("runtime config: queue %q names its queues %q and %q, where its prefix and name give %q and %q: it was edited by hand; take it from the resource again", q.Name, q.WorkQueue, q.DeadQueue, work, DeadName(work))
		}
		if q.MessageTTLMs < 0 || q.MessageTTLMs > MaxMessageTTL {
			return RuntimeConfig{}, fmt.Errorf("runtime config: queue %q: message_ttl_ms %d is out of range (0 to %d)", q.Name, q.MessageTTLMs, MaxMessageTTL)
		}
	}
	if err := Validate(c.Set()); err != nil {
		return RuntimeConfig{}, fmt.Errorf("runtime config: %w", err)
	}
	return c, nil
}
