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

// ProducerOptions configure a producer. A nil *ProducerOptions, like the zero
// value, means every default.
type ProducerOptions struct {
	// AMQPConfig is passed to amqp091-go when dialling, for TLS, heartbeats,
	// a connection name and the like. Its Recovery field is ignored: the
	// producer reconnects by itself, because on reconnect it must declare its
	// queue set again. Defaults to amqp091-go's defaults.
	AMQPConfig *amqp.Config
	// Channels is how many publisher-confirm channels the producer keeps.
	// Each carries one publish (or one batch chunk) at a time, so this bounds
	// how many publishes wait for their confirms in parallel. Defaults to
	// DefaultPublishChannels.
	Channels int
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
}

// resolved returns a copy of o with every default filled in.
func (o *ProducerOptions) resolved() ProducerOptions {
	var r ProducerOptions
	if o != nil {
		r = *o
	}
	if r.Channels <= 0 {
		r.Channels = DefaultPublishChannels
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
