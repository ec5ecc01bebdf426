package queuey

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// ParseQueueSet reads a queue set from the JSON of the queuey_queue_set
// resource's runtime_config attribute, so that a process gets exactly the
// queues Terraform made. Per-process settings stay in Go: set each
// QueueConfig's Prefetch and Retry on the result, by name, before building a
// producer or worker pool from it.
func ParseQueueSet(data []byte) (QueueSet, error) {
	c, err := topology.ParseRuntimeConfig(data)
	if err != nil {
		return QueueSet{}, fmt.Errorf("queuey: %w", err)
	}
	set := QueueSet{Prefix: c.Prefix, Queues: make([]QueueConfig, len(c.Queues))}
	for i, q := range c.Set().Queues {
		prio := q.MaxPriority
		if prio == 0 {
			prio = NoPriority
		}
		set.Queues[i] = QueueConfig{Name: q.Name, MaxPriority: prio, MessageTTL: q.MessageTTL, NonDurable: !q.Durable, QueueType: q.Type}
	}
	return set, set.Validate()
}

// LoadQueueSetFile reads ParseQueueSet's JSON from a file, such as one
// written by `terraform output -raw` of the runtime_config attribute.
func LoadQueueSetFile(path string) (QueueSet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return QueueSet{}, fmt.Errorf("queuey: read the queue set: %w", err)
	}
	set, err := ParseQueueSet(data)
	if err != nil {
		return QueueSet{}, fmt.Errorf("%w (in %s)", err, path)
	}
	return set, nil
}

// LoadQueueSet reads ParseQueueSet's JSON from the environment variable
// name: the JSON itself, or the path of a file holding it.
func LoadQueueSet(name string) (QueueSet, error) {
	v, ok := os.LookupEnv(name)
	if !ok || strings.TrimSpace(v) == "" {
		return QueueSet{}, errors.New("queuey: the environment variable " + name + " is not set: set it to the queuey_queue_set resource's runtime_config, or to the path of a file holding it")
	}
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		set, err := ParseQueueSet([]byte(v))
		if err != nil {
			return QueueSet{}, fmt.Errorf("%w (in the environment variable %s)", err, name)
		}
		return set, nil
	}
	return LoadQueueSetFile(v)
}

// RuntimeConfig is the JSON that ParseQueueSet reads for the set s in vhost:
// what the queuey_queue_set resource exposes as runtime_config.
func (s QueueSet) RuntimeConfig(vhost string) topology.RuntimeConfig {
	return topology.NewRuntimeConfig(vhost, s.topology())
}
