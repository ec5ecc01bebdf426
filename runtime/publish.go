package queuey

// Publishing: how a job becomes an AMQP message, and the entry points of
// the publish pipeline.
//
// Internal API, for the worker (unexported, stable):
//
//	(*Producer).publishEnvelope(ctx, env Envelope, holdTTLms int64) error
//	    Publishes env as built by newPublishing. holdTTLms == 0 sends it
//	    straight to env.Queue (a broker name); holdTTLms > 0 declares the
//	    hold queue env.Queue + ".deferred." + holdTTLms and sends it there, to
//	    come back to env.Queue when the TTL runs out, renewing the hold
//	    queue or sending the message again when the publish took longer
//	    than the TTL (held.go). A held publish needs env.Queue to be a work
//	    queue of this producer's set, else ErrUnknownQueue. The caller sets
//	    Attempt, Deferrals and Priority.
//	(*Producer).publishEnvelopeWith(ctx, env, holdTTLms, headers amqp.Table) error
//	    The same, carrying over headers (e.g. a delivery's), minus the ones
//	    the broker adds on dead-lettering (see stripDeathHeaders).
//	(*Producer).publishRaw(ctx, queue string, msg amqp.Publishing) error
//	    Publishes msg as given (for dead letters, including a malformed body
//	    copied verbatim, and for jobs given back to a deleted work queue) to
//	    the broker queue queue: mandatory, confirmed, diverted if queue is a
//	    work or dead-letter queue of the set (see below).
//	(*Producer).queueConfig(work string) (topology.Queue, bool)
//	    The resolved config (max priority, durability, TTL) of a work queue of
//	    the producer's set, by broker name; false for any other name.
//
// Every publish goes to the default exchange with the queue name as routing
// key, mandatory, and waits for its publisher confirm. A basic.return means
// no queue had that name (ErrUnroutable), a basic.nack that the broker did
// not take the message (ErrNacked).
//
// The pipeline, from the top: publishOne, publishHeld (held.go) and
// EnqueueBatch (producer.go, by chunks of maxChunk) make one delivery per
// job and hand them to the delivery loop (delivery.go), which keeps each
// job's state and decides from one table what every outcome means. It
// sends through a confirmer (confirmer.go), one confirm-mode channel of the
// producer's pool (ProducerOptions.Channels) and the only code that talks
// to the channel. A try holds a turn on a channel, and up to
// ProducerOptions.PublishesPerChannel tries share one, their messages in
// flight together, each waiting for its own confirms; hold queues are
// declared on channels of their own (declchannel.go).
//
// Diversion (divert.go; internal/divert states the protocol). A migration
// (terraform apply changing a queue's arguments) moves a queue's messages
// into its migration queue, deletes the queue and declares it again.
// RabbitMQ confirms a message routed to a queue whose deletion is under
// way, and drops it, so a producer publishing to the queue meanwhile would
// lose jobs it was told were enqueued. While the migration runs, its divert
// queue exists, and producers publish into the migration queue instead. So
// before every try of a publish sent straight to a work or dead-letter queue
// of the producer's set (retries after a return or a lost channel included),
// the producer picks the routing key: the queue, or its migration queue
// while the divert queue exists. It learns which by a probe (divert.Probe).
// A result is reused for divert.Recheck from when its probe was sent;
// within that, a publish reads it with one atomic load and takes no lock.
// Past it, the next publish probes, and the publishes to the same queue that
// need a result meanwhile wait for that probe rather than send their own
// (probes, a singleflight). A publish never goes, to either queue, on a
// result older than divert.Usable: it probes again. Nor does the choice end
// with the send: a message confirmed divert.Grace or more after the probe it
// was routed by was sent may have reached the queue while a migration
// deleted it, and is sent again, routed anew (divert.Late). Writes held up
// by the kernel, the broker's flow control or a stalled process thus cost a
// duplicate, never a job.
//
// A diverted message returned as unroutable (its migration queue is
// missing, which happens only when someone deleted it by hand) is sent
// again at once to the queue. Errors name the queue the caller asked for,
// and the queue a message was diverted to; the unroutable retry decides by
// the queue asked for, never by the routing key.
//
// Not diverted: held publishes (into a hold queue, the producer's own and
// never migrated; what it dead-letters goes to the work queue by name, which
// the broker does, not a producer), and every publish of an undeclared
// producer, which does not know which queues belong to a set.

import (
	"context"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// Message properties.
const (
	contentTypeJSON = "application/json"
	headerXDeath    = "x-death"
	// Prefixes of the headers RabbitMQ adds when it dead-letters a message
	// (x-first-death-reason, x-last-death-queue, ...).
	headerFirstDeathPrefix = "x-first-death-"
	headerLastDeathPrefix  = "x-last-death-"
)

// newPublishing builds the message for env; see the comment at the top of
// this file.
func newPublishing(env Envelope, persistent bool, headers amqp.Table) (amqp.Publishing, error) {
	body, err := encodeEnvelope(env)
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("queuey: encode job %s: %w", env.JobID, err)
	}
	h := stripDeathHeaders(headers)
	h[topology.HeaderDeferrals] = int64(env.Deferrals)
	h[topology.HeaderAttempt] = int64(env.Attempt)
	mode := amqp.Transient
	if persistent {
		mode = amqp.Persistent
	}
	return amqp.Publishing{
		Headers:       h,
		ContentType:   contentTypeJSON,
		DeliveryMode:  mode,
		Priority:      env.Priority,
		CorrelationId: shortString(env.CorrelationID), // cut for jobs from elsewhere: see shortString
		MessageId:     shortString(env.JobID),
		Type:          shortString(env.JobType),
		Timestamp:     time.Now(),
		Body:          body,
	}, nil
}

// stripDeathHeaders copies h without the headers RabbitMQ adds when it
// dead-letters a message, and without a quorum queue's delivery count. A
// republished job is a new message: carrying them over would make its
// history look like the broker's, x-death grows with every round through a
// hold queue, and a copied x-delivery-count would reach the first delivery
// from a RabbitMQ 4.0 quorum queue, which keeps a publisher's (3.10 sets 0;
// both measured), and make the worker dead-letter a fresh job as one at its
// delivery limit.
func stripDeathHeaders(h amqp.Table) amqp.Table {
	out := make(amqp.Table, len(h)+2)
	for k, v := range h {
		if k == headerXDeath || k == topology.HeaderDeliveryCount || strings.HasPrefix(k, headerFirstDeathPrefix) || strings.HasPrefix(k, headerLastDeathPrefix) {
			continue
		}
		out[k] = v
	}
	return out
}

// queueConfig looks up a work queue of the producer's set by broker name.
func (p *Producer) queueConfig(work string) (topology.Queue, bool) {
	q, ok := p.queues[work]
	return q, ok
}

// persistent reports whether a job for queue q, as queueConfig returned it,
// is published persistent: when the queue is durable, and when this
// producer did not declare it (known false), since it may well be durable
// and a persistent message costs little on a transient queue.
func persistent(q topology.Queue, known bool) bool { return !known || q.Durable }

// publishEnvelope publishes env now or through a hold queue; see the comment
// at the top of this file.
func (p *Producer) publishEnvelope(ctx context.Context, env Envelope, holdTTLms int64) error {
	return p.publishEnvelopeWith(ctx, env, holdTTLms, nil)
}

// publishEnvelopeWith is publishEnvelope carrying over headers.
func (p *Producer) publishEnvelopeWith(ctx context.Context, env Envelope, holdTTLms int64, headers amqp.Table) error {
	if err := p.begin(); err != nil {
		return err
	}
	defer p.end()
	q, known := p.queueConfig(env.Queue)
	switch {
	case holdTTLms < 0:
		return fmt.Errorf("queuey: hold TTL %d ms is negative", holdTTLms)
	case holdTTLms > topology.MaxHoldTTL:
		return &topology.DelayTooLongError{Delay: time.Duration(holdTTLms) * time.Millisecond}
	case holdTTLms > 0 && !known:
		return unknownQueue(env.Queue)
	}
	msg, err := newPublishing(env, persistent(q, known), headers)
	if err != nil {
		return err
	}
	// When the job is to be runnable, for a worker to measure how late it
	// started (JobRun.ReadyAt): written for a held job, and renewed for a
	// job whose carried-over headers have it.
	if _, carried := headers[topology.HeaderReadyAt]; holdTTLms > 0 || carried {
		msg.Headers[topology.HeaderReadyAt] = msg.Timestamp.UnixMilli() + holdTTLms
	}
	if holdTTLms == 0 {
		return p.publishOne(ctx, env.Queue, msg)
	}
	return p.publishHeld(ctx, env.Queue, q.Durable, holdTTLms, msg)
}

// publishRaw publishes msg as given; see the comment at the top of this file.
func (p *Producer) publishRaw(ctx context.Context, queue string, msg amqp.Publishing) error {
	if err := p.begin(); err != nil {
		return err
	}
	defer p.end()
	return p.publishOne(ctx, queue, msg)
}

func unknownQueue(work string) error {
	return fmt.Errorf("queuey: queue %q: %w: a delay or deferral needs a work queue this producer declared, for its hold queue to return the job to", work, ErrUnknownQueue)
}

// declared reports whether queue is a work or dead-letter queue of the
// producer's set.
func (p *Producer) declared(queue string) bool {
	if _, ok := p.queues[queue]; ok {
		return true
	}
	work, dead := strings.CutSuffix(queue, topology.DeadSuffix)
	_, ok := p.queues[work]
	return dead && ok
}
