package queuey

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// WorkerOptions configure a worker pool. A nil *WorkerOptions, like the zero
// value, means every default.
//
// Retry policies are resolved per job, highest precedence first:
//
//  1. the worker's own, when it implements WorkerWithRetryPolicy (it sees
//     the job's arguments);
//  2. RetryByKind, for the job's kind;
//  3. RetryByQueue, for the queue the job was taken from;
//  4. the kind's default, when its args implement JobArgsWithRetryPolicy;
//  5. the queue's default, QueueConfig.Retry of the queue the job was taken
//     from;
//  6. Retry, the pool's default for every queue that sets none;
//  7. the zero RetryPolicy: exponential, 10 attempts, 1 s doubling to 5 min.
type WorkerOptions struct {
	// AMQPConfig is passed to amqp091-go when dialling, for TLS, heartbeats
	// and a connection name. Its Recovery field is ignored: the pool
	// reconnects by itself, because it must redeclare and resubscribe.
	// Defaults to amqp091-go's defaults.
	AMQPConfig *amqp.Config
	// Concurrency bounds how many deliveries are handled at once across
	// all queues. A handler abandoned at its timeout (see JobTimeout) no
	// longer counts: its delivery is settled and its slot goes to the next
	// one, so handlers that ignore their context can leave more than
	// Concurrency running. Defaults to the sum of the consumed queues'
	// prefetch, so that every delivery the broker hands over can start at
	// once.
	Concurrency int
	// ConsumerTimeout is the broker's consumer_timeout for the consumed
	// queues: how long a delivery may stay unacknowledged before the broker
	// closes its channel and redelivers every unacknowledged delivery of
	// that channel, not only the slow one. RabbitMQ 3.10 does not tell
	// clients its value, so state it when the broker's is not the default.
	// NewWorkerPool refuses a JobTimeout above it. The time a delivery
	// waits for a handler slot counts too, as does a handler that outlives
	// JobTimeout 0 (no timeout) or its own WorkerWithTimeout timeout, which
	// are not checked. Defaults to 30 min, RabbitMQ's default.
	ConsumerTimeout time.Duration
	// DeferGranularity is the step a deferral's delay is rounded up to. It
	// must be a whole number of milliseconds. Defaults to 1 s.
	DeferGranularity time.Duration
	// JobTimeout bounds one run of a handler: its context is cancelled, and
	// the run counts as a failure and is retried, with the handler's own
	// error if it returns within AbandonGrace (100 ms) of the deadline. A
	// handler that ignores its context is abandoned after that grace, still
	// running, so that its delivery (and a shutdown) does not wait for it. A worker implementing
	// WorkerWithTimeout overrides it. It must not exceed ConsumerTimeout.
	// Defaults to none, which leaves a job that runs longer than the
	// broker's consumer_timeout to have its channel closed under it.
	JobTimeout time.Duration
	// Logger receives a record per job, with its id (job_id), kind
	// (job_type), queue, attempt and correlation_id: success at Debug,
	// deferral at Info, retry at Warn, dead letters at Error. Each record
	// about a job that ran is logged with the context its handler ran with,
	// so that a slog.Handler can read what middleware put there (a trace
	// id: see queueyotel.LogHandler). Defaults to slog.Default().
	Logger *slog.Logger
	// Middleware wraps every run of a handler, the first outermost (see
	// WorkerMiddleware). Defaults to none.
	Middleware []WorkerMiddleware
	// OnDeadLetter runs before a job is published to its dead-letter queue,
	// for alerting. A panic in it is recovered and logged; it cannot stop
	// the dead letter. Defaults to none.
	OnDeadLetter func(ctx context.Context, dl DeadLetter)
	// OnSettled is told of every delivery once the pool has settled it
	// (acknowledged it, published its retry, deferral or dead letter, or
	// given it back), those that reached no handler included: for metrics.
	// It runs on the goroutine that handled the delivery, before that
	// goroutine takes the next delivery and before the delivery's slot is
	// given back, so it must be quick. A panic in it is recovered and
	// logged. Defaults to none.
	OnSettled func(s Settlement)
	// Producer publishes retries, deferrals and dead letters. It must have
	// been built from the same queue set, so that it knows the queues.
	// Defaults to a producer the pool opens, on a connection of its own, and
	// closes when it stops.
	Producer *Producer
	// Queues are the logical queues of the set to consume. Defaults to all
	// of them.
	Queues []string
	// Retry is the pool's default retry policy for every queue whose
	// QueueConfig sets no Retry, below the job kind's own default. Defaults
	// to nil: the zero RetryPolicy.
	Retry *RetryPolicy
	// RetryByKind overrides the retry policy of a job kind. Defaults to none.
	RetryByKind map[string]RetryPolicy
	// RetryByQueue overrides the retry policy of every job taken from a
	// logical queue. Defaults to none.
	RetryByQueue map[string]RetryPolicy
	// RetryGranularity is the step a retry's delay is rounded up to, which
	// bounds the number of hold queues retries create per work queue (with a
	// 5 min cap, 1 s allows up to 300). It must be a whole number of
	// milliseconds. Defaults to 1 s.
	RetryGranularity time.Duration
}

// DefaultConsumerTimeout is RabbitMQ's default consumer_timeout, which a
// worker pool assumes unless WorkerOptions.ConsumerTimeout states another.
const DefaultConsumerTimeout = 30 * time.Minute

// consumerTimeoutSource says where a pool's consumer timeout came from,
// for its errors.
func consumerTimeoutSource(o *WorkerOptions) string {
	if o == nil || o.ConsumerTimeout == 0 {
		return ", RabbitMQ's default, assumed since WorkerOptions.ConsumerTimeout is not set"
	}
	return ", as WorkerOptions.ConsumerTimeout states"
}

// DeadLetter is what OnDeadLetter is told about a job on its way to the
// dead-letter queue.
type DeadLetter struct {
	// Body is the message body, copied verbatim to the dead-letter queue.
	Body []byte
	// Err is the error that dead-lettered the job.
	Err error
	// Job describes the job; zero for a malformed envelope.
	Job JobContext
	// Queue is the broker name of the work queue the job came from.
	Queue string
	// Reason is the x-death-reason header it gets.
	Reason string
}

// resolve returns a copy of o with defaults filled in, or an error for an
// option that cannot be followed.
func (o *WorkerOptions) resolve() (WorkerOptions, error) {
	var r WorkerOptions
	if o != nil {
		r = *o
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	for _, g := range []struct {
		name string
		d    *time.Duration
	}{{"retry granularity", &r.RetryGranularity}, {"defer granularity", &r.DeferGranularity}} {
		if *g.d == 0 {
			*g.d = topology.DefaultGranularity
		}
		if *g.d < time.Millisecond || *g.d%time.Millisecond != 0 {
			return r, fmt.Errorf("worker options: %s %s must be a positive whole number of milliseconds", g.name, *g.d)
		}
	}
	if r.Concurrency < 0 {
		return r, fmt.Errorf("worker options: concurrency %d is negative: use 0 for the default (the sum of prefetch)", r.Concurrency)
	}
	if r.JobTimeout < 0 {
		return r, fmt.Errorf("worker options: job timeout %s is negative: use 0 for none", r.JobTimeout)
	}
	if r.ConsumerTimeout < 0 {
		return r, fmt.Errorf("worker options: consumer timeout %s is negative: leave it 0 for RabbitMQ's default (%s)", r.ConsumerTimeout, DefaultConsumerTimeout)
	}
	if r.ConsumerTimeout == 0 {
		r.ConsumerTimeout = DefaultConsumerTimeout
	}
	if r.JobTimeout > r.ConsumerTimeout {
		return r, fmt.Errorf("worker options: job timeout %s is longer than the broker's consumer timeout (%s%s): the broker would close the channel of a job that ran that long and redeliver all its jobs; "+
			"raise the broker's consumer_timeout (consumer_timeout in rabbitmq.conf; per queue, on RabbitMQ 3.12 and later, with a policy or the x-consumer-timeout argument), then set ConsumerTimeout to it, or lower JobTimeout",
			r.JobTimeout, r.ConsumerTimeout, consumerTimeoutSource(o))
	}
	if r.Retry != nil {
		if err := r.Retry.Validate(); err != nil {
			return r, fmt.Errorf("worker options: default %w", err)
		}
	}
	for kind, p := range r.RetryByKind {
		if err := p.Validate(); err != nil {
			return r, fmt.Errorf("worker options: job kind %q: %w", kind, err)
		}
	}
	for q, p := range r.RetryByQueue {
		if err := p.Validate(); err != nil {
			return r, fmt.Errorf("worker options: queue %q: %w", q, err)
		}
	}
	return r, nil
}
