package queuey

// Publishing: how a job becomes an AMQP message, how it reaches the broker,
// and how the producer knows the broker took it.
//
// Internal API, for the worker (unexported, stable):
//
//	(*Producer).publishEnvelope(ctx, env Envelope, holdTTLms int64) error
//	    Publishes env as built by newPublishing. holdTTLms == 0 sends it
//	    straight to env.Queue (a broker name); holdTTLms > 0 declares the
//	    hold queue env.Queue + ".deferred." + holdTTLms and sends it there, to
//	    come back to env.Queue when the TTL runs out, renewing the hold
//	    queue or sending the message again when the publish took longer
//	    than the TTL (see publishHeld). A held publish needs
//	    env.Queue to be a work queue of this producer's set, else
//	    ErrUnknownQueue. The caller sets Attempt, Deferrals and Priority.
//	(*Producer).publishEnvelopeWith(ctx, env, holdTTLms, headers amqp.Table) error
//	    The same, carrying over headers (e.g. a delivery's), minus the ones
//	    the broker adds on dead-lettering (see stripDeathHeaders).
//	(*Producer).publishRaw(ctx, queue string, msg amqp.Publishing) error
//	    Publishes msg as given (for dead letters, including a malformed body
//	    copied verbatim) to the broker queue queue: mandatory, confirmed,
//	    diverted only if queue is a work queue of the set (see below).
//	(*Producer).queueConfig(work string) (topology.Queue, bool)
//	    The resolved config (max priority, durability, TTL) of a work queue of
//	    the producer's set, by broker name; false for any other name.
//	newPublishing(env Envelope, persistent bool, headers amqp.Table) (amqp.Publishing, error)
//	    The message for env: the envelope as JSON body, x-attempt and
//	    x-deferrals headers, priority, message_id, type, content type,
//	    correlation id, timestamp.
//	stripDeathHeaders(h amqp.Table) amqp.Table
//	    A copy of h without x-death, x-first-death-* and x-last-death-*.
//	newProducer(c *conn, ownConn bool, set *QueueSet, prefix string, opts *ProducerOptions) *Producer
//	    A producer over a conn the caller made (see conn.go); set nil means
//	    undeclared. It declares nothing itself: the conn's onConnect
//	    (declareSet, declare.go) does. With ownConn false, Close leaves the
//	    conn open.
//
// Every publish goes to the default exchange with the queue name as routing
// key, mandatory, and waits for its publisher confirm. A basic.return means
// no queue had that name (ErrUnroutable), a basic.nack that the broker did
// not take the message (ErrNacked).
//
// Returns and confirms arrive on different Go channels, so they have to be
// correlated; amqp091-go's README lists return/ack ordering as a non-goal,
// because a receiver selecting on both Go channels can see them in either
// order. What does hold (channel.go, dispatch, in v1.17.0): the broker sends
// a message's basic.return before its basic.ack, and amqp091-go's single
// reader goroutine finishes handing the return to every return listener
// (a plain send into a buffered Go channel) before it processes the ack.
// So a producer gives each publish (or batch chunk) an AMQP channel of its
// own from a pool, waits for every confirm of the chunk, and only then
// drains the channel's return listener without blocking: every return of the
// chunk is in it, and nothing else was published on that channel meanwhile.
// A publish whose context ends while it waits for the confirms drains the
// listener all the same, before it throws the channel away: a message
// whose confirm did arrive may have been returned, and is then not
// enqueued; the others may or may not have been, and are reported so.
// The listener's buffer (maxChunk) always has room, so amqp091-go never
// drops a return for want of a reader. Concurrency comes from the size of
// the pool (ProducerOptions.Channels).
//
// Diversion (divert.go; topology.DivertName states the protocol). A
// migration (terraform apply changing a queue's arguments) moves the work
// queue's messages into its migration queue, deletes the work queue and
// declares it again. RabbitMQ confirms a message routed to a queue whose
// deletion is under way, and drops it, so a producer publishing to the work
// queue meanwhile would lose jobs it was told were enqueued. While the
// migration runs, its divert queue exists, and producers publish into the
// migration queue instead. So before every try of a publish sent straight to
// a work queue of the producer's set (retries after a return or a lost
// channel included), the producer picks the routing key: the work queue, or
// its migration queue while the divert queue exists. It learns which by a
// probe: an empty, transient, mandatory message to the divert queue's name,
// whose basic.return says there is none and whose basic.nack says there is
// one (an ack without a return, a race with the divert queue's deletion,
// counts as one). A result is reused for divert.Recheck from when
// its probe was sent; within that, a publish reads it with one atomic load
// and takes no lock. Past it, the next publish probes, and the publishes to
// the same queue that need a result meanwhile wait for that probe rather
// than send their own (probes, a singleflight). A publish never goes, to
// either queue, on a result older than divert.Usable: it probes
// again. Nor does the choice end with the send: a message confirmed
// divert.Grace or more after the probe it was routed by was sent
// may have reached the work queue while a migration deleted it, and is sent
// again, routed anew (confirmedLate). Writes held up by the kernel, the
// broker's flow control or a stalled process thus cost a duplicate, never
// a job.
//
// The probe runs on the channel the publish holds, once it is open, right
// before the messages go out on it: a result is not spent waiting for a
// free channel or a connection, and a publish never holds one channel while
// it waits for another, which with one channel in the pool would deadlock.
// A diverted message returned as unroutable (its migration queue is missing,
// which happens only when someone deleted it by hand) is sent again at once
// to the work queue. Errors name the queue the caller asked for, and the
// queue a message was diverted to; the unroutable retry decides by the queue
// asked for, never by the routing key.
//
// Not diverted: held publishes (into a hold queue) and dead letters, whose
// queues are never migrated, and every publish of an undeclared producer,
// which does not know which queues are work queues.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
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

// maxChunk is how many messages one batch chunk publishes before waiting for
// their confirms. It is also the buffer of each channel's return listener,
// which must hold every return of a chunk: amqp091-go drops a notification
// its listener does not take within 5 s.
const maxChunk = 128

// newPublishing builds the message for env; see the comment at the top of
// this file.
func newPublishing(env Envelope, persistent bool, headers amqp.Table) (amqp.Publishing, error) {
	body, err := json.Marshal(env)
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
// dead-letters a message. A republished job is a new message: carrying them
// over would make its history look like the broker's, and x-death grows with
// every round through a hold queue.
func stripDeathHeaders(h amqp.Table) amqp.Table {
	out := make(amqp.Table, len(h)+2)
	for k, v := range h {
		if k == headerXDeath || strings.HasPrefix(k, headerFirstDeathPrefix) || strings.HasPrefix(k, headerLastDeathPrefix) {
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

// publishHeld publishes msg into the hold queue of work for ttlMs,
// declaring the hold queue immediately before every try: a message sent
// again after a reconnect may find the queue expired meanwhile.
//
// A confirm is not enough. The hold queue expires 2*ttl after its last
// declaration (x-expires), and a publish into it does not count as use: a
// message that reaches it more than ttl after the declaration (a stall
// between declaring and publishing, or in the broker: flow control, a
// wait for a channel, a slow confirm) can see the queue expire before the
// message's own TTL sends it on, and an expiring queue deletes its
// messages. Let d be when the declaration this try used started (for one
// it shared, when that one started, which may be before this publish
// joined it: the broker processed it at or after d), and c when the
// confirm arrived (the message had reached the queue by then):
//
//   - c-d <= ttl: the message leaves the queue by c+ttl <= d+2*ttl, before
//     the queue can expire. This is the common case, and costs nothing.
//   - Otherwise the queue is declared again, a renewal (renewHold). If
//     the renewal returns before d+2*ttl, the queue was still there when
//     the broker processed it, and it now outlives the message.
//   - Otherwise the queue may have expired with the message in it: the
//     message is published again, declaration and all, which may enqueue
//     the job twice (at-least-once allows it), at most maxHeldRounds
//     times in all. After that, or if the renewal fails, the publish fails
//     saying the job may or may not have been enqueued.
//
// A job returned as unroutable found the hold queue expired before it
// arrived (it waited longer than 2*ttl for a channel, or stalled): it
// reached no queue, and is sent again, declaration and all, within the same
// maxHeldRounds.
//
// Resending whenever c-d > ttl would be simpler, and under load, when
// c-d > ttl is common and the renewal nearly always in time, it would
// flood the queue with duplicates.
func (p *Producer) publishHeld(ctx context.Context, work string, durable bool, ttlMs int64, msg amqp.Publishing) error {
	hold := topology.HoldName(work, ttlMs)
	ttl := time.Duration(ttlMs) * time.Millisecond
	var declared time.Time // when the latest try's declaration started
	out := []outgoing{{key: hold, msg: msg, declare: func(ctx context.Context) error {
		at, err := p.declareHold(ctx, hold, work, ttlMs, durable)
		declared = at
		if err == nil && p.hooks.heldDeclared != nil {
			p.hooks.heldDeclared()
		}
		return err
	}}}
	var errs [1]error
	earlierCopy := false // a copy sent before may be in the queue
	for round := 1; ; round++ {
		errs[0] = nil
		p.publishRetrying(ctx, out, errs[:])
		if errors.Is(errs[0], ErrUnroutable) && round < maxHeldRounds && ctx.Err() == nil {
			// The hold queue expired between its declaration and the
			// job's arrival (a long wait for a channel, a stall): the
			// job reached no queue. Declare the queue and send it again.
			p.heldResends.Add(1)
			p.opts.Logger.Warn("queuey: a held job found its hold queue expired; declaring it and sending the job again", "queue", hold, "job_id", msg.MessageId)
			continue
		}
		if errs[0] != nil {
			if earlierCopy {
				return fmt.Errorf("queuey: publish to %q: the job may or may not have been enqueued: its hold queue may have expired with an earlier copy, and sending it again failed: %w", hold, errs[0])
			}
			return errs[0]
		}
		confirmed := time.Now()
		if confirmed.Sub(declared) <= ttl {
			return nil
		}
		err := p.renewHold(ctx, hold, work, ttlMs, durable, confirmed.Add(-ttl))
		renewed := time.Now()
		if err == nil && renewed.Sub(declared) < 2*ttl {
			return nil
		}
		late := fmt.Sprintf("the job was confirmed %v after its hold queue's declaration began, more than the queue's TTL of %v", confirmed.Sub(declared).Round(time.Millisecond), ttl)
		if err == nil {
			late += fmt.Sprintf(", and the queue's renewal returned %v after it, so the queue may have expired (x-expires %v) with the job in it", renewed.Sub(declared).Round(time.Millisecond), 2*ttl)
		}
		switch {
		case err != nil && (round == maxHeldRounds || ctx.Err() != nil):
			return fmt.Errorf("queuey: publish to %q: the job may or may not have been enqueued: %s, and renewing the queue failed: %w", hold, late, err)
		case round == maxHeldRounds:
			return fmt.Errorf("queuey: publish to %q: the job may or may not have been enqueued: %s; it was sent %d times, each time too late", hold, late, round)
		case ctx.Err() != nil:
			return fmt.Errorf("queuey: publish to %q: the job may or may not have been enqueued: %s; it could not be sent again: %w", hold, late, ctx.Err())
		}
		p.heldResends.Add(1)
		earlierCopy = true
		if err != nil {
			late += fmt.Sprintf(", and renewing the queue failed: %v", err)
		}
		p.opts.Logger.Warn("queuey: a held job may have expired with its hold queue; sending it again", "queue", hold, "job_id", msg.MessageId, "reason", late)
	}
}

// maxHeldRounds bounds how often publishHeld sends a job again because its
// hold queue may have expired with it.
const maxHeldRounds = maxPublishTries

// renewHold declares hold again after a held publish that took longer than
// the queue's TTL; see publishHeld. The declaration must have started no
// earlier than notBefore (the confirm minus the TTL): one processed before
// the message arrived renews the queue only until 2*ttl after it, which
// need not outlast the message. A declaration in flight that began earlier
// is waited for, and the queue declared once more.
func (p *Producer) renewHold(ctx context.Context, hold, work string, ttlMs int64, durable bool, notBefore time.Time) error {
	p.heldRenewals.Add(1)
	if p.hooks.renewing != nil {
		p.hooks.renewing()
	}
	for {
		at, err := p.declareHold(ctx, hold, work, ttlMs, durable)
		if err != nil || !at.Before(notBefore) {
			return err
		}
	}
}

// outgoing is one message of a chunk.
type outgoing struct {
	// key is the queue the caller asked for: the routing key, unless the
	// message is diverted. Errors and the unroutable retry go by it.
	key string
	msg amqp.Publishing
	// declare, when set, declares the message's queue; it runs before
	// every try to send the message.
	declare func(context.Context) error
	// divert, when set, is key's divert cache: key is a work queue of the
	// producer's set, and every try picks the routing key by it.
	divert *divertCache
	// rk is the routing key of the current try: key, or its migration
	// queue while it is diverted. Set by route.
	rk string
	// probed is when the probe of the divert queue that rk was picked by
	// was sent, when divert is set. Set by route.
	probed time.Time
	// confirmed is when sendOn saw the try's ack; zero until then.
	confirmed time.Time
	// maybeErr is the error of the latest try that may have enqueued the
	// message all the same, nil if none did (see publishRetrying).
	maybeErr error
}

// target names where o went, for errors: the queue asked for, and the
// queue it was diverted to if it was.
func (o *outgoing) target() string {
	if o.rk == "" || o.rk == o.key {
		return strconv.Quote(o.key)
	}
	return fmt.Sprintf("%q (diverted to %q while it is migrated)", o.key, o.rk)
}

// outgoingTo is a message to queue, as sent to it directly (not through a
// hold queue): diverted if queue is a work queue of the producer's set.
func (p *Producer) outgoingTo(queue string, msg amqp.Publishing) outgoing {
	return outgoing{key: queue, msg: msg, divert: p.diverts[queue]}
}

// publishOne publishes one message and waits for its confirm.
func (p *Producer) publishOne(ctx context.Context, key string, msg amqp.Publishing) error {
	var errs [1]error
	p.publishRetrying(ctx, []outgoing{p.outgoingTo(key, msg)}, errs[:])
	return errs[0]
}

// Backoff of the retries of a publish returned as unroutable.
const (
	unroutableMinBackoff = 50 * time.Millisecond
	unroutableMaxBackoff = time.Second
)

// publishRetrying is publishChunk, then, for up to UnroutableRetry, again
// for the messages the broker returned as unroutable whose queue is a work
// or dead-letter queue of the producer's set: such a queue exists unless it
// is being migrated, which leaves it absent for moments. The queue is the
// one the caller asked for, whatever routing key a diverted try used.
//
// A job whose last try failed after an earlier try may have enqueued it (its
// channel closed before the confirm, or it was confirmed too late to trust)
// gets an error that says so, whatever the last try's was.
func (p *Producer) publishRetrying(ctx context.Context, out []outgoing, errs []error) {
	p.publishUntilRouted(ctx, out, errs)
	for i, err := range errs {
		if m := out[i].maybeErr; err != nil && m != nil && err != m {
			errs[i] = fmt.Errorf("%w; an earlier try may have enqueued the job all the same: %v", err, m)
		}
	}
}

// publishUntilRouted is publishRetrying without the last paragraph.
func (p *Producer) publishUntilRouted(ctx context.Context, out []outgoing, errs []error) {
	p.publishChunk(ctx, out, errs)
	if p.opts.UnroutableRetry <= 0 || p.queues == nil {
		return
	}
	deadline := time.Now().Add(p.opts.UnroutableRetry)
	for n := 0; ; n++ {
		var again []int
		for i, err := range errs {
			if errors.Is(err, ErrUnroutable) && p.declared(out[i].key) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			return
		}
		wait := min(unroutableMinBackoff<<min(n, 8), unroutableMaxBackoff)
		if time.Until(deadline) < wait {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		sub := make([]outgoing, len(again))
		subErrs := make([]error, len(again))
		for k, i := range again {
			sub[k] = out[i]
		}
		p.publishChunk(ctx, sub, subErrs)
		for k, i := range again {
			errs[i] = subErrs[k]
			if sub[k].maybeErr != nil {
				out[i].maybeErr = sub[k].maybeErr
			}
		}
	}
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

// pubChannel is a confirm-mode channel of the pool, with its return listener.
// It is used by one publisher at a time.
type pubChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
}

// acquire takes a channel from the pool, waiting for one to be free.
func (p *Producer) acquire(ctx context.Context) (*pubChannel, error) {
	select {
	case pc := <-p.pool:
		return pc, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *Producer) release(pc *pubChannel) { p.pool <- pc }

// open makes sure pc has a live channel in confirm mode. Channels die with
// their connection or when the broker closes them, and are reopened here.
func (p *Producer) open(ctx context.Context, pc *pubChannel) error {
	if pc.ch != nil && !pc.ch.IsClosed() {
		return nil
	}
	pc.discard()
	ch, err := p.conn.channelUntil(ctx, p.closing)
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return fmt.Errorf("queuey: put channel in confirm mode: %w", err)
	}
	pc.ch = ch
	pc.returns = ch.NotifyReturn(make(chan amqp.Return, maxChunk))
	return nil
}

// discard closes pc's channel, if any, so that nothing published on it
// before can be mistaken for a later publish's confirm or return.
func (pc *pubChannel) discard() {
	if pc.ch != nil {
		_ = pc.ch.Close()
	}
	pc.ch, pc.returns = nil, nil
}

// maxPublishTries bounds how often a message is sent again because its
// channel closed under it (the connection was lost) before the broker
// confirmed or refused it.
const maxPublishTries = 3

// publishChunk publishes up to maxChunk messages on one channel of the pool
// and waits for all their confirms, setting errs[i] for each message that the
// broker did not take. Messages of one chunk must have distinct MessageIds
// when there is more than one.
//
// A message whose channel closed before its confirm arrived is sent again on
// a new channel, once the connection is back: the broker may have taken it
// already, so this can enqueue a job twice, which at-least-once delivery
// allows; giving up would leave the caller no better choice than the same
// retry.
//
// A publishing channel is taken from the pool for each try, after the
// try's hold-queue declarations, so that no channel sits idle while they
// run.
func (p *Producer) publishChunk(ctx context.Context, out []outgoing, errs []error) {
	publishTries(ctx, out, errs, func(pending []int) []int {
		pc, err := p.acquire(ctx)
		if err != nil {
			for _, i := range pending {
				errs[i] = fmt.Errorf("queuey: publish to %q: %w", out[i].key, err)
			}
			return nil
		}
		defer p.release(pc)
		return p.publishOnce(ctx, pc, out, pending, errs)
	})
}

// publishTries calls once with the messages to send until it returns none
// worth sending again, at most maxPublishTries times. Before every try it
// runs the declaration of each message that has one (a hold queue); a
// message whose declaration fails is not sent, and keeps that error.
func publishTries(ctx context.Context, out []outgoing, errs []error, once func(pending []int) []int) {
	pending := make([]int, len(out))
	for i := range pending {
		pending[i] = i
	}
	for try := 1; len(pending) > 0; try++ {
		declared := pending[:0] // filtered in place
		for _, i := range pending {
			if out[i].declare != nil {
				if err := out[i].declare(ctx); err != nil {
					errs[i] = err
					continue
				}
			}
			declared = append(declared, i)
		}
		if len(declared) == 0 {
			return
		}
		pending = once(declared)
		if try == maxPublishTries || ctx.Err() != nil {
			return
		}
	}
}

// publishOnce publishes out[i] for every i in pending on pc, waits for their
// confirms and collects their returns. It sets errs[i] for each, and returns
// the ones worth sending again: those that did not go out, or whose outcome
// was lost with a closed channel.
//
// It picks each message's routing key first (route), on pc, which it holds
// until the messages are out. A diverted message returned as unroutable
// (its migration queue is missing: deleted by hand, as a migration never
// does while the divert queue exists) is sent again at once to the queue
// asked for, unless the context has ended: then its error says it was not.
func (p *Producer) publishOnce(ctx context.Context, pc *pubChannel, out []outgoing, pending []int, errs []error) (retry []int) {
	if err := p.open(ctx, pc); err != nil {
		for _, i := range pending {
			errs[i] = fmt.Errorf("queuey: publish to %q: %w", out[i].key, err)
		}
		return nil
	}
	send, retry := p.route(ctx, pc, out, pending, errs)
	retry = append(retry, p.sendOn(ctx, pc, out, send, errs)...)

	var direct []int
	for _, i := range send {
		if o := &out[i]; o.rk != o.key && errors.Is(errs[i], ErrUnroutable) {
			if ctx.Err() != nil {
				// Too late to send it anywhere else: say where
				// it was not sent.
				errs[i] = fmt.Errorf("%w; it was not sent to %q itself: %w", errs[i], o.key, ctx.Err())
				continue
			}
			o.rk = o.key
			direct = append(direct, i)
		}
	}
	return append(retry, p.sendOn(ctx, pc, out, direct, errs)...)
}

// sendOn publishes out[i] for every i in pending on pc with routing key
// out[i].rk; otherwise like publishOnce. It does not reopen pc: the routing
// keys were picked for being sent now, not after waiting for a connection.
func (p *Producer) sendOn(ctx context.Context, pc *pubChannel, out []outgoing, pending []int, errs []error) (retry []int) {
	if len(pending) == 0 {
		return nil
	}
	if pc.ch == nil {
		// A probe gave up on the channel (see probeOnce).
		for _, i := range pending {
			errs[i] = fmt.Errorf("queuey: publish to %s: the channel closed before the job was sent: %w", out[i].target(), amqp.ErrClosed)
		}
		if ctx.Err() != nil {
			return nil
		}
		return pending
	}
	dcs := make([]*amqp.DeferredConfirmation, len(pending))
	for k, i := range pending {
		out[i].confirmed = time.Time{}
		dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, "", out[i].rk, true, false, out[i].msg)
		if err != nil {
			for _, j := range pending[k:] {
				errs[j] = fmt.Errorf("queuey: publish to %s: %w", out[j].target(), err)
			}
			if ctx.Err() == nil {
				// Not sent: the channel or the connection is gone.
				retry = append(retry, pending[k:]...)
			}
			break
		}
		dcs[k] = dc
	}
	if p.hooks.sent != nil {
		p.hooks.sent()
	}

	// settle records the outcome of the confirm of pending[k].
	settle := func(k int, acked bool) {
		i := pending[k]
		switch {
		case acked:
			errs[i], out[i].confirmed = nil, time.Now()
		case pc.ch.IsClosed():
			// amqp091-go settles the confirms of a closed channel as
			// nacks; the broker said nothing.
			errs[i] = fmt.Errorf("queuey: publish to %s: the channel closed before the broker confirmed the job, which may or may not have been enqueued: %w", out[i].target(), amqp.ErrClosed)
			out[i].maybeErr = errs[i]
			retry = append(retry, i)
		default:
			errs[i] = fmt.Errorf("queuey: publish to %s: %w", out[i].target(), ErrNacked)
		}
	}
	gaveUp := false
	for k, dc := range dcs {
		if dc == nil {
			continue
		}
		acked, err := dc.WaitContext(ctx)
		if err == nil {
			settle(k, acked)
			if p.hooks.confirmed != nil {
				p.hooks.confirmed(k)
			}
			continue
		}
		// The context ended. The confirms that arrived all the same
		// (WaitContext picks at random when both are ready) still count,
		// and so do their returns, read below: an acked message that was
		// returned was not enqueued.
		gaveUp = true
		for kk := k; kk < len(dcs); kk++ {
			d := dcs[kk]
			if d == nil {
				continue
			}
			select {
			case <-d.Done():
				settle(kk, d.Acked())
			default:
				errs[pending[kk]] = fmt.Errorf("queuey: publish to %s: gave up waiting for the broker's confirm; the job may or may not have been enqueued: %w", out[pending[kk]].target(), err)
			}
		}
		break
	}
	collectReturns(pc, out, pending, errs)
	// A return is final, even for a message whose confirm was lost with
	// its channel: the unroutable retries deal with it, not a resend here.
	retry = slices.DeleteFunc(retry, func(i int) bool { return errors.Is(errs[i], ErrUnroutable) })
	late := confirmedLate(out, pending, errs)
	if gaveUp {
		// Confirms still due on this channel would be mistaken for the
		// next publisher's: throw it away. The context has ended: nothing
		// is worth another try.
		pc.discard()
		return nil
	}
	if len(late) > 0 {
		p.lateConfirms.Add(int64(len(late)))
		p.opts.Logger.Warn("queuey: jobs were confirmed too late to rule out that a migration deleted their queue under them; sending them again", "queue", out[late[0]].key, "jobs", len(late), "reason", errs[late[0]])
	}
	return append(retry, late...)
}

// confirmedLate sets errs[i], and returns i, for every message out[i] of
// pending that was routed by a probe of its divert queue and confirmed
// DivertGrace or more after that probe was sent. It may have reached its
// queue while a migration deleted it, which RabbitMQ confirms and drops
// (see topology.DivertName). One confirmed sooner reached its queue before
// the migration could delete it.
func confirmedLate(out []outgoing, pending []int, errs []error) (late []int) {
	for _, i := range pending {
		o := &out[i]
		if errs[i] != nil || o.divert == nil || o.confirmed.IsZero() {
			continue
		}
		if divert.Late(o.probed, o.confirmed) {
			d := o.confirmed.Sub(o.probed)
			errs[i] = fmt.Errorf("queuey: publish to %s: the job may or may not have been enqueued: it was confirmed %v after the probe of the divert queue it was routed by was sent, not within %v, so a migration may have deleted its queue under it", o.target(), d.Round(time.Millisecond), divert.Grace)
			o.maybeErr = errs[i]
			late = append(late, i)
		}
	}
	return late
}

// collectReturns reads the returns waiting in pc's listener and sets errs[i]
// for every out[i], i in pending, that was returned. Every return of a
// message is handed to the listener before its confirm: once a message's
// confirm has been seen, its return, if any, is there to read. A return
// read for a message whose confirm was not seen is just as final: the
// message reached no queue.
func collectReturns(pc *pubChannel, out []outgoing, pending []int, errs []error) {
	var byID map[string]int
	if len(out) > 1 {
		byID = make(map[string]int, len(pending))
		for _, i := range pending {
			byID[out[i].msg.MessageId] = i
		}
	}
	for {
		select {
		case r, ok := <-pc.returns:
			if !ok {
				return
			}
			i := pending[0]
			if byID != nil {
				var found bool
				if i, found = byID[r.MessageId]; !found {
					continue
				}
			}
			errs[i] = fmt.Errorf("queuey: publish to %s: %w: %s (%d): no queue has that name", out[i].target(), ErrUnroutable, r.ReplyText, r.ReplyCode)
		default:
			return
		}
	}
}

// declareHold declares a hold queue immediately before a held publish. It is
// never cached: the redeclaration renews x-expires, and a producer that
// remembered the queue existed would let the broker delete it while in use.
// Publishes that arrive while a declaration of the same queue is in flight
// share it instead of starting another.
//
// It returns when the declaration it used started, which for a shared one
// is before this call: publishHeld reasons from it.
func (p *Producer) declareHold(ctx context.Context, hold, work string, ttlMs int64, durable bool) (time.Time, error) {
	return p.flights.doAt(ctx, hold, func(ctx context.Context) error {
		return p.declareOnDeclChannel(ctx, hold, durable, topology.HoldArgs(work, ttlMs))
	})
}

// flights shares calls in progress by key, and remembers nothing once a call
// has ended: a singleflight.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// flight is one call in progress.
type flight struct {
	done chan struct{}
	err  error
	// started is when the call began, before fn ran: what it did at the
	// broker happened at or after it.
	started time.Time
	// waiters counts the callers that joined the call rather than run
	// their own; read by tests, under flights.mu.
	waiters int
}

// do runs fn for key, or, when a call for key is already running, waits for
// it and returns its result. A shared call that failed only because the
// context of the caller that ran it ended is run again for a caller whose
// context is still live.
func (fs *flights) do(ctx context.Context, key string, fn func(context.Context) error) error {
	_, err := fs.doAt(ctx, key, fn)
	return err
}

// doAt is do, also returning when the call whose result it returns started:
// for a call it joined, that is before it joined, possibly long before.
func (fs *flights) doAt(ctx context.Context, key string, fn func(context.Context) error) (time.Time, error) {
	for {
		fs.mu.Lock()
		if fs.m == nil {
			fs.m = map[string]*flight{}
		}
		f, inFlight := fs.m[key]
		if inFlight {
			f.waiters++
		} else {
			f = &flight{done: make(chan struct{}), started: time.Now()}
			fs.m[key] = f
		}
		fs.mu.Unlock()

		if !inFlight {
			f.err = fn(ctx)
			fs.mu.Lock()
			delete(fs.m, key)
			fs.mu.Unlock()
			close(f.done)
			return f.started, f.err
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return f.started, ctx.Err()
		}
		if isContextError(f.err) && ctx.Err() == nil {
			continue
		}
		return f.started, f.err
	}
}

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// declChannel is a declaration channel: never a publishing channel, because
// a declaration the broker refuses closes its channel, and must not take
// publishes in flight down with it. It is used by one declaration at a time,
// because amqp091-go would hand a refusal to whichever call on the channel
// happens to read it.
type declChannel struct {
	ch *amqp.Channel
}

// declareOnDeclChannel declares a queue on a declaration channel from the
// producer's pool, opening (or reopening) the channel as needed.
func (p *Producer) declareOnDeclChannel(ctx context.Context, name string, durable bool, args map[string]any) error {
	var dc *declChannel
	select {
	case dc = <-p.decls:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { p.decls <- dc }()
	for try := 0; ; try++ {
		if dc.ch == nil || dc.ch.IsClosed() {
			ch, err := p.conn.channelUntil(ctx, p.closing)
			if err != nil {
				return fmt.Errorf("queuey: declare queue %q: %w", name, err)
			}
			dc.ch = ch
		}
		err := declareQueue(dc.ch, name, durable, args)
		// A channel closed by an earlier refusal or a lost connection
		// was not this declaration's fault: reopen (waiting for the
		// connection to come back) and try once more.
		if err != nil && try == 0 && lostWithConnection(err) {
			dc.ch = nil
			continue
		}
		return err
	}
}

// lostWithConnection reports whether a declaration failed because its
// channel or connection went away rather than because the broker refused it.
// A broker shutting down (rabbitmqctl stop_app, a restart) closes every
// connection with CONNECTION_FORCED, and a dropped socket surfaces as a
// FRAME_ERROR; both reach a declaration in flight as that *amqp.Error, not
// as amqp.ErrClosed.
func lostWithConnection(err error) bool {
	if errors.Is(err, amqp.ErrClosed) {
		return true
	}
	var ae *amqp.Error
	return errors.As(err, &ae) && (ae.Code == amqp.ConnectionForced || ae.Code == amqp.FrameError)
}
