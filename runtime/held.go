package queuey

// Held publishes: a job sent into a hold queue, to come back to its work
// queue when the queue's TTL runs out. Their rows of the delivery loop's
// table (delivery.go): the hold queue is declared before every try, and a
// job confirmed late, or returned, is renewed or sent again.
//
// A confirm is not enough. The hold queue expires 2*ttl after its last
// declaration (x-expires), and a publish into it does not count as use: a
// message that reaches it more than ttl after the declaration (a stall
// between declaring and publishing, or in the broker: flow control, a wait
// for a channel, a slow confirm) can see the queue expire before the
// message's own TTL sends it on, and an expiring queue deletes its messages.
// Let d be when the declaration the latest try used started (for one it
// shared, when that one started, which may be before this publish joined
// it: the broker processed it at or after d), and c when the ack was seen
// (the message had reached the queue by then):
//
//   - c-d <= ttl: the message leaves the queue by c+ttl <= d+2*ttl, before
//     the queue can expire. This is the common case, and costs nothing.
//   - Otherwise the queue is declared again, a renewal (renewHold). If the
//     renewal returns before d+2*ttl, the queue was still there when the
//     broker processed it, and it now outlives the message.
//   - Otherwise the queue may have expired with the message in it: the
//     message is published again, declaration and all, which may enqueue
//     the job twice (at-least-once allows it), in a new round, at most
//     maxHeldRounds rounds in all. After that, or if the renewal fails, the
//     publish fails saying the job may or may not have been enqueued.
//
// A job returned as unroutable found the hold queue expired before it
// arrived (it waited longer than 2*ttl for a channel, or stalled): it
// reached no queue, and is sent again in a new round, declaration and all,
// within the same maxHeldRounds.
//
// Resending whenever c-d > ttl would be simpler, and under load, when
// c-d > ttl is common and the renewal nearly always in time, it would flood
// the queue with duplicates.
//
// Held publishes are not diverted: hold queues are the producer's own,
// never migrated, and what they dead-letter goes to the work queue by name,
// which the broker does, not a producer.

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// maxHeldRounds bounds the rounds of a held publish: how often it is sent
// again because its hold queue may have expired with it, or had expired
// before it arrived.
const maxHeldRounds = maxPublishTries

// heldState is what a delivery into a hold queue carries.
type heldState struct {
	work    string
	ttlMs   int64
	ttl     time.Duration
	durable bool
	// declared is when the declaration the latest try used started.
	declared time.Time
	// round counts the rounds, from 1.
	round int
	// earlierCopy is set once a copy sent before may be in the queue.
	earlierCopy bool
}

// holdDeclarer declares hold queues. It returns when the declaration it
// used started, which for one it shared with a concurrent publish is before
// the call: the held rows reason from it.
type holdDeclarer interface {
	declareHold(ctx context.Context, hold, work string, ttlMs int64, durable bool) (started time.Time, err error)
}

// publishHeld publishes msg into the hold queue of work for ttlMs.
func (p *Producer) publishHeld(ctx context.Context, work string, durable bool, ttlMs int64, msg amqp.Publishing) error {
	d := &delivery{key: topology.HoldName(work, ttlMs), msg: msg, hold: &heldState{
		work: work, ttlMs: ttlMs, ttl: time.Duration(ttlMs) * time.Millisecond, durable: durable, round: 1,
	}}
	p.deliver(ctx, []*delivery{d})
	return d.err
}

// declareHolds declares the hold queue of every held delivery of send,
// immediately before it is sent: a job sent again after a reconnect may
// find its queue expired meanwhile. It is never cached: the declaration
// renews x-expires, and a producer that remembered the queue existed would
// let the broker delete it while in use. A delivery whose declaration fails
// fails with that error and is not sent; declareHolds returns the others.
func (p *Producer) declareHolds(ctx context.Context, send []*delivery) []*delivery {
	return keep(send, func(d *delivery) bool {
		h := d.hold
		if h == nil {
			return true
		}
		at, err := p.declareHeld(ctx, d)
		if err != nil {
			if b, blocked := p.conn.block(); blocked && isContextError(err) {
				// The block began while the declaration ran: the
				// broker stopped reading it.
				err = fmt.Errorf("queuey: declare hold queue %q: %w", d.key, newBlockedError(b, false, err))
			}
			d.fail(err)
			return false
		}
		h.declared = at
		return true
	})
}

// heldAcked is the row of a held job whose ack was seen: done when it came
// within a TTL of the declaration, else a renewal.
func (p *Producer) heldAcked(d *delivery) {
	if d.acked.Sub(d.hold.declared) <= d.hold.ttl {
		d.end(nil)
		return
	}
	d.next = stepRenew
}

// heldReturned is the row of a held job returned as unroutable: its hold
// queue expired between the declaration and the job's arrival (a long wait
// for a channel, a stall), and the job reached no queue. It declares the
// queue and sends the job again in a new round, if it has one left.
func (p *Producer) heldReturned(ctx context.Context, d *delivery, err error) {
	if d.hold.round >= maxHeldRounds || ctx.Err() != nil {
		d.fail(err)
		return
	}
	p.heldResends.Add(1)
	p.opts.Logger.Warn("queuey: a held job found its hold queue expired; declaring it and sending the job again", "queue", d.key, "job_id", d.msg.MessageId)
	d.hold.round++
	d.newRound()
}

// renew is the row of a held job confirmed more than a TTL after its
// declaration: renew the hold queue, and if even that came after the queue
// may have expired, send the job again in a new round.
func (p *Producer) renew(ctx context.Context, d *delivery) {
	h := d.hold
	err := p.renewHold(ctx, d.key, h, d.acked.Add(-h.ttl))
	renewed := time.Now()
	if err == nil && renewed.Sub(h.declared) < 2*h.ttl {
		d.end(nil)
		return
	}
	late := fmt.Sprintf("the job was confirmed %v after its hold queue's declaration began, more than the queue's TTL of %v", d.acked.Sub(h.declared).Round(time.Millisecond), h.ttl)
	if err == nil {
		late += fmt.Sprintf(", and the queue's renewal returned %v after it, so the queue may have expired (x-expires %v) with the job in it", renewed.Sub(h.declared).Round(time.Millisecond), 2*h.ttl)
	}
	switch {
	case err != nil && (h.round == maxHeldRounds || ctx.Err() != nil):
		d.end(fmt.Errorf("queuey: publish to %q: the job may or may not have been enqueued: %s, and renewing the queue failed: %w", d.key, late, err))
		return
	case h.round == maxHeldRounds:
		d.end(fmt.Errorf("queuey: publish to %q: the job may or may not have been enqueued: %s; it was sent %d times, each time too late", d.key, late, h.round))
		return
	case ctx.Err() != nil:
		d.end(fmt.Errorf("queuey: publish to %q: the job may or may not have been enqueued: %s; it could not be sent again: %w", d.key, late, ctx.Err()))
		return
	}
	p.heldResends.Add(1)
	h.earlierCopy = true
	if err != nil {
		late += fmt.Sprintf(", and renewing the queue failed: %v", err)
	}
	p.opts.Logger.Warn("queuey: a held job may have expired with its hold queue; sending it again", "queue", d.key, "job_id", d.msg.MessageId, "reason", late)
	h.round++
	d.newRound()
}

// renewHold declares hold again. The declaration must have started no
// earlier than notBefore (the ack minus the TTL): one processed before the
// message arrived renews the queue only until 2*ttl after it, which need not
// outlast the message. A declaration in flight that began earlier is waited
// for, and the queue declared once more.
func (p *Producer) renewHold(ctx context.Context, hold string, h *heldState, notBefore time.Time) error {
	p.heldRenewals.Add(1)
	for {
		at, err := p.holds.declareHold(ctx, hold, h.work, h.ttlMs, h.durable)
		if err != nil || !at.Before(notBefore) {
			return err
		}
	}
}
