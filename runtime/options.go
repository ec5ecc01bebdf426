package queuey

import (
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// DefaultPublishChannels is how many confirm channels a producer publishes
// on unless configured.
const DefaultPublishChannels = 16

// DefaultPublishesPerChannel is how many publishes share a channel at once
// unless configured.
const DefaultPublishesPerChannel = 16

// DefaultBatchChunks is how many chunks of an EnqueueBatch are in flight at
// once unless configured.
const DefaultBatchChunks = 8

// ProducerOptions configure a producer. A nil *ProducerOptions, like the zero
// value, means every default.
type ProducerOptions struct {
	// AMQPConfig is passed to amqp091-go when dialling, for TLS, heartbeats,
	// a connection name and the like. Its Recovery field is ignored: the
	// producer reconnects by itself, because on reconnect it must declare its
	// queue set again. Defaults to amqp091-go's defaults.
	AMQPConfig *amqp.Config
	// Channels is how many publisher-confirm channels the producer keeps.
	// The producer opens up to as many channels again for declaring hold
	// queues, so that delays to distinct hold queues declare in parallel.
	// Defaults to DefaultPublishChannels.
	Channels int
	// PublishesPerChannel is how many publishes (or batch chunks) share one
	// channel at once, each waiting for its own confirms while the others'
	// messages follow it onto the wire: Channels × PublishesPerChannel
	// bounds how many publishes are in flight, and more wait for a turn.
	// A channel carries at most 256 messages at once whatever this says.
	// 1 gives every publish a channel of its own while it waits, as
	// producers did before publishes were pipelined.
	// Defaults to DefaultPublishesPerChannel.
	PublishesPerChannel int
	// BatchChunks is how many chunks of an EnqueueBatch (128 jobs each) are
	// in flight at once, each on a channel of its own while the pool has
	// one free: the broker takes a batch faster over several channels
	// than over one. Jobs of a chunk arrive in batch order; the chunks
	// interleave. 1 sends the chunks one after another on one channel, so
	// that the jobs of each queue arrive in batch order (with the
	// exceptions EnqueueBatch lists). Defaults to DefaultBatchChunks.
	BatchChunks int
	// DeferGranularity is the step Defer delays are rounded up to, which
	// bounds how many hold queues deferrals create per work queue. It must be
	// a whole number of milliseconds. Defaults to 1 s.
	DeferGranularity time.Duration
	// DelayGranularity is the step EnqueueAfter delays are rounded up to. It
	// must be a whole number of milliseconds. Defaults to 1 s.
	DelayGranularity time.Duration
	// Logger receives connection loss and reconnection events. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// Middleware wraps every enqueue call, the first outermost (see
	// ProducerMiddleware). Defaults to none.
	Middleware []ProducerMiddleware
	// UnroutableRetry is how long a publish onto a work or dead-letter
	// queue of the producer's declared set keeps being retried, with
	// backoff (50 ms doubling to 1 s), while the broker returns it as
	// unroutable because the queue does not exist. A migration (terraform
	// apply changing the queue's arguments) leaves a work queue absent for
	// a few milliseconds between its deletion and its redeclaration, but
	// the producer does not publish to it then: it diverts those jobs into
	// the migration queue (see Producer). The retry covers what diversion
	// does not: a migration by a provider older than diversion, a queue an
	// operator deleted and declares again, and a diverted job whose
	// migration queue was deleted by hand, which is sent to the work queue
	// instead. After that time, or when the publish's context ends first,
	// the publish fails with ErrUnroutable. An undeclared producer never
	// retries: it cannot tell a queue being migrated from a wrong name.
	// Negative disables the retry. Defaults to DefaultUnroutableRetry.
	UnroutableRetry time.Duration
}

// DefaultUnroutableRetry is ProducerOptions.UnroutableRetry unless
// configured: far longer than a migration keeps a queue absent (a few
// milliseconds on a local broker), short enough that a queue deleted for
// good is reported soon.
const DefaultUnroutableRetry = 5 * time.Second

// resolved returns a copy of o with every default filled in.
func (o *ProducerOptions) resolved() ProducerOptions {
	var r ProducerOptions
	if o != nil {
		r = *o
	}
	if r.Channels <= 0 {
		r.Channels = DefaultPublishChannels
	}
	if r.PublishesPerChannel <= 0 {
		r.PublishesPerChannel = DefaultPublishesPerChannel
	}
	if r.BatchChunks <= 0 {
		r.BatchChunks = DefaultBatchChunks
	}
	if r.DeferGranularity == 0 {
		r.DeferGranularity = topology.DefaultGranularity
	}
	if r.DelayGranularity == 0 {
		r.DelayGranularity = topology.DefaultGranularity
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	if r.UnroutableRetry == 0 {
		r.UnroutableRetry = DefaultUnroutableRetry
	}
	return r
}

// amqpConfig is the configuration to dial with: the caller's, without
// amqp091-go's own recovery, which would reopen channels without declaring
// the queue set first.
func (o ProducerOptions) amqpConfig() amqp.Config {
	var cfg amqp.Config
	if o.AMQPConfig != nil {
		cfg = *o.AMQPConfig
	}
	cfg.Recovery = nil
	return cfg
}

// EnqueueOptions are the options of one enqueue. A nil *EnqueueOptions means
// none. Priority is not an option: RabbitMQ delivers higher priorities first,
// and queuey reserves that for deferrals (new work goes in at 0, a deferred
// job comes back at the queue's max priority), so that a deferral always
// overtakes the backlog.
type EnqueueOptions struct {
	// CorrelationID ties the job to whatever caused it, such as a request
	// id. It is set as the AMQP correlation_id and in the envelope. Defaults
	// to none.
	CorrelationID string
}

func (o *EnqueueOptions) correlationID() string {
	if o == nil {
		return ""
	}
	return o.CorrelationID
}
