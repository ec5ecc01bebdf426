package queuey

import (
	"fmt"
	"time"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// NoPriority as a QueueConfig.MaxPriority declares a work queue without
// x-max-priority. (The Terraform provider spells the same thing
// max_priority = 0.)
const NoPriority = -1

// DefaultPrefetch is a queue's prefetch unless configured.
const DefaultPrefetch = 16

// QueueConfig configures one logical queue. Its zero value, with a Name, is a
// durable priority queue with 10 levels, no message TTL and a prefetch of 16:
// the same queue the Terraform provider declares by default.
type QueueConfig struct {
	// MaxPriority is the work queue's x-max-priority: deliveries with a
	// higher priority come first. Defaults to 10 on a classic queue and to
	// none on a quorum queue, which refuses it; NoPriority disables it.
	MaxPriority int
	// MessageTTL is the work queue's x-message-ttl: RabbitMQ deletes a
	// job that has waited this long in the work queue. Nothing records it:
	// the work queue has no dead-letter exchange, so the job does not reach
	// the dead-letter queue, no handler runs it, no log line or error
	// tells of it, and its producer was told it was enqueued. The wait
	// starts each time the job enters the work queue (when it is enqueued,
	// and again when a delay, retry or deferral brings it back from its
	// hold queue); a job a worker is handling does not expire. Set it only
	// for jobs that are worthless once late. Defaults to none: jobs wait
	// until they are handled.
	MessageTTL time.Duration
	// Name is the logical name; the work queue is Prefix + "." + Name.
	Name string
	// NonDurable declares the work queue and its hold queues transient.
	// Defaults to false: queues survive a broker restart. The dead-letter
	// queue is durable either way. RabbitMQ deprecates transient queues
	// from 3.13 and refuses them by default from 4.3: there a producer or
	// worker pool of the set fails to start with ErrTransientRefused.
	NonDurable bool
	// Prefetch is how many unacknowledged deliveries a worker takes from
	// this queue at once. Defaults to 16.
	Prefetch int
	// QueueType is the type of the work and dead-letter queues:
	// QueueTypeClassic (the default; "" is the same) or QueueTypeQuorum,
	// replicated across a cluster's nodes so that the loss of a minority
	// of them loses nothing. A quorum queue must be durable and takes no
	// MaxPriority: RabbitMQ 4.0 and later give it two priority levels
	// without an argument, which deferrals use to go ahead of the backlog
	// (served two for one, not strictly first); 3.x delivers in order.
	// Hold queues are classic either way. Workers dead-letter a job a
	// quorum queue redelivered topology.WorkDeliveryLimit-1 times without
	// running it, before the broker's delivery limit would drop it.
	QueueType string
	// Retry is the queue's default retry policy, the lowest level of the
	// precedence that WorkerOptions describes: any policy of the job's
	// worker or kind, or a worker override, comes first. Defaults to
	// WorkerOptions.Retry, then the zero RetryPolicy.
	Retry *RetryPolicy
}

// QueueSet is a prefix and the logical queues under it, the unit that a
// producer or a worker declares and that the Terraform resource
// queuey_queue_set provisions.
type QueueSet struct {
	// Prefix is joined to every logical name with ".". It must not be empty
	// or end in ".".
	Prefix string
	// Queues are the logical queues of the set.
	Queues []QueueConfig
}

// Queue types of QueueConfig.QueueType.
const (
	QueueTypeClassic = topology.DefaultQueueType
	QueueTypeQuorum  = topology.QuorumQueueType
)

// Validate runs every name and argument check of the set. A producer or
// worker runs it before declaring anything.
func (s QueueSet) Validate() error {
	for _, q := range s.Queues {
		// Checked here rather than left to topology, whose message speaks
		// the provider's language, where 0 means no priorities.
		if q.MaxPriority < NoPriority || q.MaxPriority > topology.MaxPriorityLimit {
			return fmt.Errorf("queue %q: max priority %d is out of range: use 1 to %d, 0 for the default of %d, or NoPriority",
				q.Name, q.MaxPriority, topology.MaxPriorityLimit, topology.DefaultMaxPriority)
		}
		if q.Prefetch < 0 {
			return fmt.Errorf("queue %q: prefetch %d is negative: use 0 for the default of %d", q.Name, q.Prefetch, DefaultPrefetch)
		}
		if q.Retry != nil {
			if err := q.Retry.Validate(); err != nil {
				return fmt.Errorf("queue %q: default %w", q.Name, err)
			}
		}
	}
	return topology.Validate(s.topology())
}

// WorkQueue is the broker name of the work queue of logical queue name.
func (s QueueSet) WorkQueue(name string) string { return topology.WorkName(s.Prefix, name) }

// DeadQueue is the broker name of the dead-letter queue of logical queue name.
func (s QueueSet) DeadQueue(name string) string {
	return topology.DeadName(topology.WorkName(s.Prefix, name))
}

func (s QueueSet) topology() topology.Set {
	t := topology.Set{Prefix: s.Prefix, Queues: make([]topology.Queue, len(s.Queues))}
	for i, q := range s.Queues {
		t.Queues[i] = q.topology()
	}
	return t
}

// topology resolves the defaults of q into the shared model.
func (q QueueConfig) topology() topology.Queue {
	t := topology.Queue{Name: q.Name, MaxPriority: q.MaxPriority, MessageTTL: q.MessageTTL, Durable: !q.NonDurable}
	if q.QueueType != QueueTypeClassic {
		t.Type = q.QueueType
	}
	switch t.MaxPriority {
	case 0:
		t.MaxPriority = topology.DefaultMaxPriority
		if t.Quorum() {
			t.MaxPriority = 0
		}
	case NoPriority:
		t.MaxPriority = 0
	}
	return t
}

// prefetch resolves the default prefetch.
func (q QueueConfig) prefetch() int {
	if q.Prefetch == 0 {
		return DefaultPrefetch
	}
	return q.Prefetch
}
