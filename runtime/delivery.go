package queuey

// The delivery loop: it sends a group of jobs through confirmers
// (confirmer.go) until each is done or failed, keeping one delivery per job,
// and decides what every outcome means in one table (judge).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
)

// maxChunk is how many messages one batch chunk publishes before waiting for
// their confirms. It is also the buffer of each channel's return listener,
// which must hold every return of a chunk: amqp091-go drops a notification
// its listener does not take within 5 s.
const maxChunk = 128

// maxPublishTries bounds the sends of a job in one round: a round is the
// first send and the resends after a lost channel, a message not sent, a
// probe lost twice or a late confirm. A publish retried while unroutable
// starts a new round after each backoff; a held publish has up to
// maxHeldRounds rounds, so it is sent at most 3 × 3 times.
const maxPublishTries = 3

// Backoff of the retries of a publish returned as unroutable.
const (
	unroutableMinBackoff = 50 * time.Millisecond
	unroutableMaxBackoff = time.Second
)

// step is what the loop does next with a delivery.
type step uint8

const (
	stepSend    step = iota // send it (again), on the next try
	stepDirect              // returned while diverted: send it to its queue, now, on the same channel
	stepRenew               // held, confirmed more than a TTL after its declaration: renew the hold queue
	stepBackoff             // returned, its queue belongs to the set: wait, then send it again
	stepDone                // err is its outcome: nil, enqueued
)

// delivery is one job on its way: everything the loop knows about it.
type delivery struct {
	// key is the queue the caller asked for: the routing key, unless the
	// job is diverted. Errors and the unroutable retry go by it.
	key string
	msg amqp.Publishing
	// divert, when set, is key's divert cache: key is a work or
	// dead-letter queue of the producer's set, and every try picks the
	// routing key by it.
	divert *divertCache
	// hold, when set, makes this a held publish into the hold queue key.
	hold *heldState

	// rk is the routing key of the current try: key, or its migration
	// queue while it is diverted; probed is when the probe of the divert
	// queue rk was picked by was sent. Set by route.
	rk     string
	probed time.Time
	// tries counts the sends of the current round.
	tries int
	// acked is when the latest send's ack was seen.
	acked time.Time

	next step
	// err is the latest outcome's error, and the job's once next is
	// stepDone.
	err error
	// maybe is the error of the latest try that may have enqueued the job
	// all the same (a channel closed before the confirm, a late confirm).
	maybe error
	// nodeDown counts the nacks in a row of a queue whose node is down.
	nodeDown int
}

// target names where d went, for errors: the queue asked for, and the
// queue it was diverted to if it was.
func (d *delivery) target() string {
	if d.rk == "" || d.rk == d.key {
		return strconv.Quote(d.key)
	}
	return fmt.Sprintf("%q (diverted to %q while it is migrated)", d.key, d.rk)
}

// fail ends d's round with err. A job an earlier try may have enqueued gets
// an error that says so, whatever the last try's was; a held job whose
// earlier copy may have expired with its hold queue too.
func (d *delivery) fail(err error) {
	if d.maybe != nil && err != d.maybe {
		err = fmt.Errorf("%w; an earlier try may have enqueued the job all the same: %v", err, d.maybe)
	}
	if d.hold != nil && d.hold.earlierCopy {
		err = fmt.Errorf("queuey: publish to %q: the job may or may not have been enqueued: its hold queue may have expired with an earlier copy, and sending it again failed: %w", d.key, err)
	}
	d.end(err)
}

// end ends d with err as it is.
func (d *delivery) end(err error) { d.err, d.next = err, stepDone }

// newRound makes d start a new round: its tries are counted afresh.
func (d *delivery) newRound() { d.next, d.tries = stepSend, 0 }

// resend sends d again on the next try, after err, if its round and its
// context allow; else err is its outcome.
func (d *delivery) resend(ctx context.Context, err error) {
	if d.tries < maxPublishTries && ctx.Err() == nil {
		d.err, d.next = err, stepSend
		return
	}
	d.fail(err)
}

// deliveryTo is a delivery to queue, as sent to it directly (not through a
// hold queue): diverted if queue is a work or dead-letter queue of the
// producer's set.
func (p *Producer) deliveryTo(queue string, msg amqp.Publishing) *delivery {
	d := p.direct(queue, msg)
	return &d
}

// direct is deliveryTo's delivery as a value, for a caller that allocates
// it as part of something larger (publishOne).
func (p *Producer) direct(queue string, msg amqp.Publishing) delivery {
	return delivery{key: queue, msg: msg, divert: p.diverts[queue]}
}

// publishOne publishes one message and waits for its confirm. The delivery
// and the one-element slice the loop takes share one allocation: this is
// the path of every Enqueue.
func (p *Producer) publishOne(ctx context.Context, key string, msg amqp.Publishing) error {
	one := &struct {
		d  delivery
		ds [1]*delivery
	}{d: p.direct(key, msg)}
	one.ds[0] = &one.d
	p.deliver(ctx, one.ds[:])
	return one.d.err
}

// deliver runs the loop over ds (at most maxChunk, with distinct MessageIds
// when more than one) until every delivery is done: a try sends every
// delivery that is to be sent on one confirmer, then held ones are renewed,
// and once nothing is left to send or renew, the unroutable ones back off.
func (p *Producer) deliver(ctx context.Context, ds []*delivery) {
	var ur unroutableRetry
	for {
		if send := next(ds, stepSend); len(send) > 0 {
			p.try(ctx, send)
			continue
		}
		if renew := next(ds, stepRenew); len(renew) > 0 {
			for _, d := range renew {
				p.renew(ctx, d)
			}
			continue
		}
		if !p.backOff(ctx, next(ds, stepBackoff), &ur) {
			return
		}
	}
}

// next returns the deliveries of ds whose next step is s.
func next(ds []*delivery, s step) []*delivery {
	return keep(ds, func(d *delivery) bool { return d.next == s })
}

// keep returns the deliveries of ds that ok keeps, in order. It returns ds
// itself when ok keeps them all (the usual case: one job, or a batch going
// the same way), and allocates only when it drops one; ds is never written,
// so callers must not write the result either.
func keep(ds []*delivery, ok func(*delivery) bool) []*delivery {
	for i, d := range ds {
		if ok(d) {
			continue
		}
		out := append(make([]*delivery, 0, len(ds)-1), ds[:i]...)
		for _, d := range ds[i+1:] {
			if ok(d) {
				out = append(out, d)
			}
		}
		return out
	}
	return ds
}

// try is one try of send: declare the hold queues, take a turn on a
// channel from the pool, route, publish, and publish directly what was
// returned while diverted. A turn is taken only after the declarations, so
// that none sits idle while they run, and held until the messages are out:
// the routing keys were picked for being sent now, not after waiting for a
// channel. Nor does a publish wait inside the confirmer, for room on its
// channel or for an earlier copy of its message to be confirmed: it comes
// back not sent (busyError), waits, and is routed again.
func (p *Producer) try(ctx context.Context, send []*delivery) {
	// Nothing is written to a connection the broker is blocking: it would
	// sit unread, and a declaration with it (blocked.go).
	if err := p.conn.waitUnblocked(ctx, p.closing); err != nil {
		for _, d := range send {
			d.fail(fmt.Errorf("queuey: publish to %s: %w", d.target(), err))
		}
		return
	}
	for _, d := range send {
		d.tries++
	}
	send = p.declareHolds(ctx, send)
	if len(send) == 0 {
		return
	}
	c, err := p.acquire(ctx)
	if err == nil {
		defer p.release(c)
		err = c.open(ctx)
	}
	if err != nil {
		for _, d := range send {
			err := err
			if b := p.droppedBlocked.Load(); b != nil && errors.Is(err, ErrClosed) {
				// Close dropped the blocked connection under it.
				err = newBlockedError(*b, d.maybe != nil, err)
			}
			d.fail(fmt.Errorf("queuey: publish to %q: %w", d.key, err))
		}
		return
	}
	send = p.route(ctx, c, send)
	p.publishGroup(ctx, c, send)
	p.publishGroup(ctx, c, next(send, stepDirect))
}

// publishGroup publishes group on c and judges every fate.
func (p *Producer) publishGroup(ctx context.Context, c confirmer, group []*delivery) {
	if len(group) == 0 {
		return
	}
	out := make([]outbound, len(group))
	for i, d := range group {
		out[i] = outbound{rk: d.rk, msg: d.msg}
	}
	var late []*delivery
	for i, f := range c.publish(ctx, out) {
		if p.judge(ctx, group[i], f) {
			late = append(late, group[i])
		}
	}
	if len(late) > 0 {
		p.lateConfirms.Add(int64(len(late)))
		p.opts.Logger.Warn("queuey: jobs were confirmed too late to rule out that a migration deleted their queue under them; sending them again", "queue", late[0].key, "jobs", len(late), "reason", late[0].err)
	}
}

// judge is the table: what fate f of a send of d means, and what the loop
// does next with d. It reports whether d was confirmed late.
//
//	fate                          condition                    next
//	acked                         confirmed Grace or more      send again (a try), "may or may not
//	                              after d's probe (divert.Late) have been enqueued"
//	acked                         held                         heldAcked: done, or renew (held.go)
//	acked                         otherwise                    done
//	nacked                        its queue's node is down     wait for it, then send again (not a
//	                                                           try); fail with ErrNodeDown when the
//	                                                           context ends first (nodedown.go)
//	nacked                        otherwise                    fail: ErrNacked
//	returned                      diverted (rk != key)         send to key now, same channel and try;
//	                                                           fail if the context has ended
//	returned                      held                         heldReturned: new round (held.go)
//	returned                      key a queue of the set,      back off, then a new round, until
//	                              UnroutableRetry > 0          UnroutableRetry after the first round
//	returned                      otherwise                    fail: ErrUnroutable
//	lost with the channel                                      send again (a try), "may or may not"
//	unconfirmed (context ended)                                fail: "gave up waiting", "may or may not";
//	                                                           a *BlockedError (Sent) while blocked
//	not sent                      the channel was busy:        wait for it, then send again (not a try);
//	                              no room, or the same id      fail when the context ends first
//	                              in flight (busyError)
//	not sent                      otherwise                    send again (a try)
//
// "Send again (a try)" sends on the next try while the round has tries left
// (maxPublishTries) and the context has not ended; else the error is the
// job's. Rows decided before a send, by the same rules: a hold queue's
// declaration that fails fails the job (held.go); so does a pool or channel
// that cannot be had (the context ended, or Close began); a probe lost with
// its channel twice sends again (a try), any other probe failure fails the
// job (divert.go); a try while the broker blocks publishes waits for the
// block to end and fails the job with a *BlockedError (not sent) when the
// context ends or Close begins first (blocked.go).
func (p *Producer) judge(ctx context.Context, d *delivery, f fate) (late bool) {
	switch f.kind {
	case acked:
		if d.divert != nil && divert.Late(d.probed, f.at) {
			err := fmt.Errorf("queuey: publish to %s: the job may or may not have been enqueued: it was confirmed %v after the probe of the divert queue it was routed by was sent, not within %v, so a migration may have deleted its queue under it", d.target(), f.at.Sub(d.probed).Round(time.Millisecond), divert.Grace)
			d.maybe = err
			d.resend(ctx, err)
			return true
		}
		d.acked = f.at
		if d.hold != nil {
			p.heldAcked(d)
			return false
		}
		d.end(nil)
	case nacked:
		p.judgeNacked(ctx, d)
	case returned:
		p.judgeReturned(ctx, d, fmt.Errorf("queuey: publish to %s: %w: %s (%d): no queue has that name", d.target(), ErrUnroutable, f.ret.ReplyText, f.ret.ReplyCode))
	case lost:
		err := fmt.Errorf("queuey: publish to %s: the channel closed before the broker confirmed the job, which may or may not have been enqueued: %w", d.target(), amqp.ErrClosed)
		d.maybe = err
		d.resend(ctx, err)
	case unconfirmed:
		err := f.err
		if b, blocked := p.conn.block(); blocked {
			err = newBlockedError(b, true, f.err)
		}
		d.fail(fmt.Errorf("queuey: publish to %s: gave up waiting for the broker's confirm; the job may or may not have been enqueued: %w", d.target(), err))
	case notSent:
		var busy *busyError
		if errors.As(f.err, &busy) {
			p.waitBusy(ctx, d, busy)
			return false
		}
		d.resend(ctx, fmt.Errorf("queuey: publish to %s: %w", d.target(), f.err))
	}
	return false
}

// waitBusy is judge's row for a job not sent because its channel was busy
// (busyError): not a try, so its round keeps its tries. It waits for the
// channel to release messages, then sends the job on the next try, routed
// afresh, on whichever channel that try takes.
func (p *Producer) waitBusy(ctx context.Context, d *delivery, busy *busyError) {
	d.tries--
	select {
	case <-busy.wait:
		d.err, d.next = busy, stepSend
	case <-ctx.Done():
		d.fail(fmt.Errorf("queuey: publish to %s: gave up waiting for a turn (%v): %w", d.target(), busy, ctx.Err()))
	}
}

// judgeReturned is judge's rows for a returned job.
func (p *Producer) judgeReturned(ctx context.Context, d *delivery, err error) {
	switch {
	case d.rk != d.key:
		// Its migration queue is missing: deleted by hand, as a
		// migration never does while the divert queue exists.
		if ctx.Err() != nil {
			d.fail(fmt.Errorf("%w; it was not sent to %q itself: %w", err, d.key, ctx.Err()))
			return
		}
		d.rk, d.err, d.next = d.key, err, stepDirect
	case d.hold != nil:
		p.heldReturned(ctx, d, err)
	case p.opts.UnroutableRetry > 0 && p.declared(d.key):
		d.err, d.next = err, stepBackoff
	default:
		d.fail(err)
	}
}

// unroutableRetry is the state of a loop's unroutable retries: how many
// backoffs it made, and until when it makes them.
type unroutableRetry struct {
	n        int
	deadline time.Time
}

// backOff waits before the unroutable jobs of waiting are sent again, and
// makes them start a new round. It fails them, and reports false, once the
// wait would end past the deadline or the context ends first. A work or
// dead-letter queue of the producer's set exists unless it is being
// migrated, which leaves it absent for moments.
func (p *Producer) backOff(ctx context.Context, waiting []*delivery, r *unroutableRetry) bool {
	if len(waiting) == 0 {
		return false
	}
	if r.deadline.IsZero() {
		r.deadline = time.Now().Add(p.opts.UnroutableRetry)
	}
	wait := min(unroutableMinBackoff<<min(r.n, 8), unroutableMaxBackoff)
	r.n++
	if time.Until(r.deadline) < wait || !sleep(ctx, wait) {
		for _, d := range waiting {
			d.fail(d.err)
		}
		return false
	}
	for _, d := range waiting {
		d.newRound()
	}
	return true
}

// sleep waits for d, or reports false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// acquire takes a turn on a channel from the pool, waiting for one to be
// free; the pool holds each confirmer PublishesPerChannel times.
func (p *Producer) acquire(ctx context.Context) (confirmer, error) {
	select {
	case c := <-p.pool:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *Producer) release(c confirmer) { p.pool <- c }

// lostWithConnection reports whether an operation failed because its
// channel or connection went away rather than because the broker refused
// it. A broker shutting down (rabbitmqctl stop_app, a restart) closes every
// connection with CONNECTION_FORCED, and a dropped socket surfaces as a
// FRAME_ERROR; both reach an operation in flight as that *amqp.Error, not
// as amqp.ErrClosed. Nor does a write to a socket the broker has reset:
// amqp091-go returns the *net.OpError ("write: connection reset by peer")
// and goes on writing to that socket, failing the same way, until its
// reader sees the socket end. Any *net.OpError counts, and so do io.EOF,
// ECONNRESET and EPIPE reaching us without one around them.
func lostWithConnection(err error) bool {
	var oe *net.OpError
	if errors.Is(err, amqp.ErrClosed) || errors.As(err, &oe) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ae *amqp.Error
	return errors.As(err, &ae) && (ae.Code == amqp.ConnectionForced || ae.Code == amqp.FrameError)
}
