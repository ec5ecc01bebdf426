// Package divert is the protocol by which queuey producers keep publishing to
// a queue while a migration deletes and declares it again, shared by the
// runtime (which probes and routes) and provider/internal/migrate (which
// diverts, waits and deletes). Names and arguments of the queues involved
// are topology's (topology.MigrationName, topology.DivertName,
// topology.DivertArgs); the timing and the rules live here.
//
// Why: RabbitMQ confirms a message routed to a queue whose deletion is under
// way, and drops it. A migration therefore first declares a divert queue, a
// marker that holds nothing. While it exists, queuey producers publish what
// they would publish to the queue into its migration queue instead.
//
// A producer learns whether the divert queue exists by publishing an empty
// mandatory message to it: a basic.return says it does not, a basic.nack
// that it does. Neither closes the channel, as a passive declaration of a
// queue that does not exist would.
//
// The protocol, with the constants below:
//
//   - A producer routes a publish by a probe (see Probe and Answer) that
//     found no divert queue (to the queue) or found one (into the migration
//     queue). It reuses a probe's
//     result for Recheck from the probe's sending, and sends on one at most
//     Usable old; past that, it probes again first.
//   - A publish counts as done only if its confirm arrived less than Grace
//     after the probe it was routed by was sent (see Late): it then reached
//     its queue before the migration could delete it. One confirmed later
//     (a long write, a stalled process, flow control) may have reached a
//     queue while it was deleted, and is sent again.
//   - A migration declares the migration queue, then the divert queue, and
//     deletes the queue no sooner than Grace after the divert queue's
//     declaration returned (see Wait): every probe that found no divert
//     queue was sent before that, so a publish it routed and that counts as
//     done reached the queue before the deletion. A producer stalled past
//     that may still publish to the queue, but its publish is confirmed late
//     and sent again.
//   - It deletes the divert queue once the queue is declared again with its
//     new arguments, and deletes the migration queue no sooner than Grace
//     after that deletion returned, by the same argument for the publishes
//     routed into the migration queue.
package divert

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	// Recheck is how long a queuey producer trusts a probe of a divert
	// queue, counted from when it sent the probe.
	Recheck = 250 * time.Millisecond
	// Usable is the oldest a probe's result may be, counted from its
	// sending, for a publish to be sent by it: a producer whose probes take
	// longer than Recheck to be answered still publishes, as long as they
	// take less than this.
	Usable = Grace / 2
	// Grace is how long a migration waits after declaring a divert queue
	// before it deletes the queue, and after deleting the divert queue
	// before it deletes the migration queue. A publish confirmed within
	// Grace of its probe's sending reached its queue before either
	// deletion; one sent by a result Usable old has the other half second
	// to be written and confirmed.
	Grace = time.Second
)

// Answer is what the broker said to a probe: an empty, transient, mandatory
// message published to a divert queue's name on a confirm-mode channel.
type Answer uint8

const (
	// Returned: a basic.return, then the ack. No queue has the name: not
	// diverted.
	Returned Answer = iota
	// Refused: a basic.nack. The divert queue exists (it refuses every
	// message): diverted.
	Refused
	// Taken: an ack without a return. The probe reached a queue, which
	// only a divert queue being deleted meanwhile does: counted as
	// diverted, since the migration queue outlives the divert queue by
	// Grace.
	Taken
)

// Sender publishes a probe to the queue named queue and waits for the
// broker's answer. It returns an error when there is none: the channel or
// the connection was lost, or ctx ended first. The runtime's publishing
// channels implement it; the probe needs nothing else of them.
type Sender interface {
	SendProbe(ctx context.Context, queue string) (Answer, error)
}

// Result is what one probe learnt about a divert queue.
type Result struct {
	// SentAt is when the probe was sent, with its monotonic reading: the
	// result is reused for Recheck, and may route a publish for Usable,
	// from then, not from when the broker answered; and the late-confirm
	// rule counts from it (see Late).
	SentAt   time.Time
	Diverted bool
}

// Probe learns by one probe sent through s whether the divert queue named
// divertQueue exists.
func Probe(ctx context.Context, s Sender, divertQueue string) (Result, error) {
	sentAt := time.Now()
	a, err := s.SendProbe(ctx, divertQueue)
	if err != nil {
		return Result{}, err
	}
	return Result{SentAt: sentAt, Diverted: a != Returned}, nil
}

// Fresh reports whether r may be reused at now by a publish that did not
// wait for its probe. A nil result is never fresh.
func (r *Result) Fresh(now time.Time) bool { return r != nil && now.Sub(r.SentAt) < Recheck }

// Usable reports whether a publish may still be sent at now by r, a result
// it waited for: a probe answered later than Recheck (a busy broker) is not
// probed again at once. A nil result is never usable.
func (r *Result) Usable(now time.Time) bool { return r != nil && now.Sub(r.SentAt) < Usable }

// Late reports whether a publish routed by a probe sent at probed and
// confirmed at confirmed came too late to count as done: it may have reached
// a queue a migration was deleting, and must be sent again.
func Late(probed, confirmed time.Time) bool { return confirmed.Sub(probed) >= Grace }

// Wait returns once grace has passed since from, or with ctx's error when ctx
// ends first. A migration calls it before each of its deletions.
func Wait(ctx context.Context, from time.Time, grace time.Duration) error {
	left := time.Until(from.Add(grace))
	if left <= 0 {
		return nil
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Republishing is d, a delivered message, as a message to publish again with
// every property kept: what a migration moves, and what a worker gives back
// once the queue that delivered it is gone. The redelivered flag and the
// delivery tag belong to the delivery, not the message, and do not travel.
func Republishing(d amqp.Delivery) amqp.Publishing {
	return amqp.Publishing{
		Headers:         withoutDeliveryCount(d.Headers),
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		UserId:          d.UserId,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}

// deliveryCount is the header in which a quorum queue tells how often it
// delivered a message before (topology.HeaderDeliveryCount; this package
// imports nothing of queuey's).
const deliveryCount = "x-delivery-count"

// withoutDeliveryCount is h without a quorum queue's delivery count: a copy
// is a new message, and a RabbitMQ 4.0 quorum queue keeps a publisher's
// header on a first delivery (3.10 sets 0; both measured), so a copied count
// would follow the job to its next queue.
func withoutDeliveryCount(h amqp.Table) amqp.Table {
	if _, ok := h[deliveryCount]; !ok {
		return h
	}
	out := make(amqp.Table, len(h)-1)
	for k, v := range h {
		if k != deliveryCount {
			out[k] = v
		}
	}
	return out
}
