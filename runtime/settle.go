package queuey

import (
	"context"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// This file settles deliveries: it carries out the Outcome the dispatcher
// decided for one delivery of a subscription. The rule throughout is publish
// first, acknowledge second: a retry, a deferral or a dead letter is
// acknowledged only once the broker confirmed its publish, and a delivery
// whose publish failed goes back to its queue, so a job survives a crash at
// any point.

// settleTimeout bounds how long settling one delivery may wait for its
// republish (a retry, a deferral, a dead letter) to be confirmed, including
// waiting for a lost connection to come back. A delivery whose republish
// failed is returned to its queue, never acknowledged.
const settleTimeout = 30 * time.Second

// publisher is what a pool needs of a Producer to settle deliveries.
type publisher interface {
	publishEnvelopeWith(ctx context.Context, env Envelope, holdTTLms int64, headers amqp.Table) error
	publishRaw(ctx context.Context, queue string, msg amqp.Publishing) error
	// waitUnblocked returns once the broker does not block the
	// publisher's connection, or a *BlockedError when ctx ends first.
	waitUnblocked(ctx context.Context) error
}

func (p *Producer) waitUnblocked(ctx context.Context) error {
	return p.conn.waitUnblocked(ctx, p.closing)
}

// awaitPublishing waits, before a settle's publish, for as long as the
// broker blocks the pool's publisher: settleTimeout bounds the publish, not
// a resource alarm, which would otherwise make every delivery settled
// during it go back to its queue. The delivery stays unacknowledged
// meanwhile, holding its handler slot, so the pool stops pulling once its
// slots are full. Only a Stop that runs out of time (the job context)
// ends the wait.
func (s *subscription) awaitPublishing() error {
	return s.pool.pub.waitUnblocked(s.pool.jobCtx)
}

var _ publisher = (*Producer)(nil)

// settle carries out an outcome: for anything but an ack, it publishes first
// and acknowledges only once the broker confirmed the publish. A delivery
// whose publish failed is returned to its queue, and settle returns why.
// Its records about the job are logged with the context the handler ran
// with, for what middleware put there.
func (s *subscription) settle(d amqp.Delivery, o Outcome, took time.Duration) error {
	ctx := o.context(context.Background())
	log := s.pool.log
	switch o.Action {
	case ActionRequeue:
		if s.giveBack(d, o) {
			log.WarnContext(ctx, "queuey: job interrupted by the shutdown; returned to the queue at the same attempt", append(s.settleAttrs(o), "duration", took)...)
		}
	case ActionAck:
		// The common case: no publish to bound, and no log record to
		// build when Debug is off. A success is logged at Debug: a busy
		// worker should not write a line per job by default.
		err := s.ack(d, o)
		if log.Enabled(ctx, slog.LevelDebug) {
			log.DebugContext(ctx, "queuey: job done", append(s.settleAttrs(o), "duration", took)...)
		}
		return err
	case ActionRetry, ActionDefer:
		return s.republish(ctx, d, o)
	case ActionDeadLetter:
		return s.deadLetter(ctx, d, o)
	}
	return nil
}

// context is the context o's handler ran with, or else def.
func (o Outcome) context(def context.Context) context.Context {
	if o.ctx != nil {
		return o.ctx
	}
	return def
}

// settleAttrs are the log attributes every record about a job starts with:
// its id, kind, queue, attempt and correlation id (empty for a malformed
// envelope, which has none of them but the queue).
func (s *subscription) settleAttrs(o Outcome) []any {
	return []any{"queue", s.q.work, "job_id", o.Job.ID, "job_type", o.Job.Type, "attempt", o.Job.Attempt, "correlation_id", o.Job.CorrelationID}
}

// republish settles a retry or a deferral: the job goes back to its work
// queue through a hold queue, as the next attempt (at priority 0) or as the
// same attempt deferred (at the queue's max priority, ahead of the backlog).
func (s *subscription) republish(logCtx context.Context, d amqp.Delivery, o Outcome) error {
	if err := s.awaitPublishing(); err != nil {
		s.requeue(logCtx, d, o, err)
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	env := *o.env
	env.Queue = s.q.work
	if o.Action == ActionRetry {
		env.Attempt++
		env.Priority = 0
	} else {
		env.Deferrals++
		env.Priority = s.q.deferPriority
	}
	headers := withoutDeadLetterHeaders(d.Headers)
	if o.died > 0 {
		if headers == nil {
			headers = amqp.Table{}
		}
		headers[topology.HeaderDied] = int64(o.died)
	}
	if err := s.pool.pub.publishEnvelopeWith(ctx, env, o.HoldTTL.Milliseconds(), headers); err != nil {
		s.requeue(logCtx, d, o, err)
		return err
	}
	err := s.ack(d, o)
	switch {
	case o.died > 0:
		s.pool.log.WarnContext(logCtx, "queuey: the job was redelivered unsettled: its last run never finished (its worker died or lost its connection); counted as a failed attempt, retrying", append(s.settleAttrs(o), "max_attempts", o.Job.MaxAttempts, "delay", o.HoldTTL, "died", o.died)...)
	case o.Action == ActionRetry:
		s.pool.log.WarnContext(logCtx, "queuey: job failed; retrying", append(s.settleAttrs(o), "max_attempts", o.Job.MaxAttempts, "delay", o.HoldTTL, "error", o.Err)...)
	default:
		s.pool.log.InfoContext(logCtx, "queuey: job deferred", append(s.settleAttrs(o), "delay", o.HoldTTL, "reason", o.Reason, "deferrals", env.Deferrals)...)
	}
	return err
}

// deadLetter settles a dead letter: the dead-letter hook runs, then the
// delivery is published, as it came, to the queue's dead-letter queue.
func (s *subscription) deadLetter(logCtx context.Context, d amqp.Delivery, o Outcome) error {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	attempts := o.Job.Attempt
	if o.env == nil {
		attempts = headerInt(d.Headers, topology.HeaderAttempt)
	}
	s.runDeadLetterHook(ctx, DeadLetter{Body: d.Body, Err: o.Err, Job: o.Job, Queue: s.q.work, Reason: o.Reason})
	if err := s.awaitPublishing(); err != nil {
		s.requeue(logCtx, d, o, err)
		return err
	}
	if err := s.pool.pub.publishRaw(ctx, s.q.dead, deadLetterPublishing(d, o.Reason, s.q.work, attempts)); err != nil {
		s.requeue(logCtx, d, o, err)
		return err
	}
	err := s.ack(d, o)
	s.pool.log.ErrorContext(logCtx, "queuey: job dead-lettered", append(s.settleAttrs(o), "dead_letter_queue", s.q.dead, "reason", o.Reason, "error", o.Err)...)
	return err
}

// ack acknowledges d, and returns the error when it could not.
func (s *subscription) ack(d amqp.Delivery, o Outcome) error {
	err := d.Ack(false)
	if err == nil {
		s.settled(d)
	} else {
		// The channel is gone, and with it the delivery: the broker
		// delivers the job again, so it may run (or be republished) twice.
		s.pool.log.Warn("queuey: could not acknowledge a settled job; the broker will deliver it again", append(s.settleAttrs(o), "action", o.Action, "error", err)...)
	}
	return err
}

// requeue returns a delivery whose republish failed to its queue. It waits a
// moment first (unless the pool is stopping), so that a broker that keeps
// refusing the publish does not turn the delivery into a hot loop.
func (s *subscription) requeue(logCtx context.Context, d amqp.Delivery, o Outcome, err error) {
	s.pool.log.ErrorContext(logCtx, "queuey: could not publish the job's "+o.Action.String()+"; returning the delivery to the queue", append(s.settleAttrs(o), "error", err)...)
	t := time.NewTimer(time.Second)
	select {
	case <-t.C:
	case <-s.pool.stopCtx.Done():
		t.Stop()
	}
	s.giveBack(d, o)
}

// giveBack returns delivery d of s to its work queue unsettled, at the same
// attempt, by publishing a copy of it to the work queue and acknowledging
// it. A copy is a new message, which the broker does not mark redelivered:
// a give-back never counts as an attempt, where a requeue (basic.nack)
// would make the job look like one whose worker died (see diedOutcome).
// The copy joins the back of the queue, at its priority. Once the broker
// has cancelled s's consumer because the queue was deleted (a migration
// replacing it), the copy is the only way back: the queue that delivered it
// is gone, and deleting a queue discards the deliveries its consumers hold.
// The publish goes where a producer's would, into the migration queue while
// the migration runs. When the publish fails and the consumer was not
// cancelled, the delivery is requeued instead, and its redelivery counts:
// a broker that takes no publish is no place to guarantee the difference.
// giveBack logs its failures, and reports whether the job is back in its
// queue, or will be once the channel closes.
func (s *subscription) giveBack(d amqp.Delivery, o Outcome) bool {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	msg := divert.Republishing(d)
	// The broker refuses a user id that is not the publishing
	// connection's user.
	msg.UserId = ""
	var err error
	if _, blocked := s.pool.Blocked(); blocked && !s.cancelled() {
		// The copy would wait for the block to end; a give-back is
		// what a pool does when it cannot wait.
		err = ErrPublishingBlocked
	} else {
		err = s.pool.pub.publishRaw(ctx, s.q.work, msg)
	}
	if err == nil {
		s.ack(d, o)
		return true
	}
	if !s.cancelled() {
		s.pool.log.Warn("queuey: could not publish the job back to its queue; requeueing it, so its redelivery counts as an attempt", append(s.settleAttrs(o), "error", err)...)
		if err := d.Nack(false, true); err != nil {
			s.pool.log.Warn("queuey: could not return the job to its queue; the broker will deliver it again when the channel closes", append(s.settleAttrs(o), "error", err)...)
		} else {
			s.settled(d)
		}
		return true
	}
	// A requeue would drop it too: leave it to the channel's close.
	s.pool.log.Error("queuey: the job's queue was deleted while the job ran, and publishing the job to it again failed: unless a try of that publish reached the queue after all, the job is lost", append(s.settleAttrs(o), "error", err)...)
	return false
}

// runDeadLetterHook runs OnDeadLetter, recovering its panic.
func (s *subscription) runDeadLetterHook(ctx context.Context, dl DeadLetter) {
	hook := s.pool.opts.OnDeadLetter
	if hook == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			s.pool.log.Error("queuey: the dead-letter hook panicked", "queue", dl.Queue, "job_id", dl.Job.ID, "job_type", dl.Job.Type, "attempt", dl.Job.Attempt, "correlation_id", dl.Job.CorrelationID, "panic", r)
		}
	}()
	hook(ctx, dl)
}

// deadLetterPublishing is the dead letter of d: its body verbatim, its
// properties, its headers without the broker's x-death ones, plus why, from
// where, and after how many attempts. It is persistent whatever d was: the
// dead-letter queue is durable, and a dead letter lost on a restart is one
// nobody will ever know about.
func deadLetterPublishing(d amqp.Delivery, reason, work string, attempts int) amqp.Publishing {
	h := stripDeathHeaders(d.Headers)
	h[topology.HeaderDeathReason] = reason
	h[topology.HeaderOriginalQueue] = work
	h[topology.HeaderAttempts] = int64(attempts)
	h[topology.HeaderDeadLetteredAt] = time.Now().UnixMilli()
	return amqp.Publishing{
		Headers:         h,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		// Expiration is left out (the dead letter must not expire) and
		// so is UserId (the broker refuses one that is not the
		// publishing connection's user).
		Body: d.Body,
	}
}

// withoutDeadLetterHeaders copies h without the headers a dead letter gets,
// so that a dead letter replayed into its work queue and then retried does
// not carry the reason it died the first time.
func withoutDeadLetterHeaders(h amqp.Table) amqp.Table {
	if h == nil {
		return nil
	}
	out := make(amqp.Table, len(h))
	for k, v := range h {
		switch k {
		case topology.HeaderDeathReason, topology.HeaderOriginalQueue, topology.HeaderAttempts, topology.HeaderDeadLetteredAt:
		default:
			out[k] = v
		}
	}
	return out
}

// headerInt reads an integer header of any AMQP integer width, or 0.
func headerInt(h amqp.Table, key string) int {
	switch v := h[key].(type) {
	case int64:
		return int(v)
	case int32:
		return int(v)
	case int16:
		return int(v)
	case int8:
		return int(v)
	case uint8:
		return int(v)
	case uint16:
		return int(v)
	case uint32:
		return int(v)
	case int:
		return v
	}
	return 0
}
