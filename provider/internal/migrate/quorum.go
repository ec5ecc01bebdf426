package migrate

// Deleting a quorum queue only when it is empty. RabbitMQ refuses an
// if-empty delete of a quorum queue (3.10.8 and 4.0.5: "540 NOT_IMPLEMENTED
// - queue.delete operations with if-empty flag set are not supported by
// quorum queues"), and as a connection error, which would end the
// migration's connection. deleteQuorum stands in for it.

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// errQuorumNotEmpty is deleteQuorum finding messages in the queue: what an
// if-empty delete's refusal is for a classic queue (isNotEmpty).
var errQuorumNotEmpty = errors.New("quorum queue is not empty")

// quorumDeletePrefetch is the prefetch of deleteQuorum's consumer: enough
// that every message published during the delete is delivered to it rather
// than left ready.
const quorumDeletePrefetch = 65535

// quorumQuiet is how long deleteQuorum's consumer must receive nothing
// before the queue counts as empty.
const quorumQuiet = 50 * time.Millisecond

// quorumDrain bounds the wait, after the delete, for the broker to cancel
// deleteQuorum's consumer: every delivery sent before comes first.
const quorumDrain = 5 * time.Second

// deleteQuorum deletes quorum queue name if it is empty, and moves into
// rescue whatever reached it during the delete. A consumer of its own
// subscribes to the queue first, so that a message published between the
// check and the delete is delivered to it (the queue hands a new message to
// a consumer with room as it enqueues it) instead of deleted with the queue.
// The queue counts as empty when the consumer receives nothing for
// quorumQuiet and a passive declaration finds no message ready; otherwise
// nothing is deleted and the error is errQuorumNotEmpty. After the delete,
// the deliveries the consumer got are published into rescue with confirms.
// A delete that reports ready messages it discarded, which the consumer
// makes impossible, is an error that says how many.
func (m *migration) deleteQuorum(name, rescue string) error {
	_, err := m.deleteQuorumThen(name, rescue, nil)
	return err
}

// deleteQuorumThen is deleteQuorum, running beforeRescue, when set, after
// the delete and before the late deliveries are published into rescue. It
// returns how many it published.
func (m *migration) deleteQuorumThen(name, rescue string, beforeRescue func() error) (int, error) {
	ch, err := m.channel()
	if err != nil {
		return 0, err
	}
	defer func() { _ = ch.Close() }()
	if err := ch.Qos(quorumDeletePrefetch, 0, false); err != nil {
		return 0, fmt.Errorf("set the prefetch to delete %q: %w", name, err)
	}
	deliveries, err := ch.ConsumeWithContext(m.ctx, name, "queuey-migrate-delete", false, false, false, false, nil)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("subscribe to %q to delete it: %w", name, err)
	}
	if got := receive(deliveries, quorumQuiet); len(got) > 0 {
		return 0, errors.Join(fmt.Errorf("%w: %q holds messages", errQuorumNotEmpty, name), giveBack(ch, name, len(got)))
	}
	// On the consumer's channel: the reply follows every delivery sent
	// before it.
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("check that %q is empty: %w", name, err)
	}
	if got := receive(deliveries, quorumQuiet); len(got) > 0 || q.Messages > 0 {
		return 0, errors.Join(fmt.Errorf("%w: %q holds messages", errQuorumNotEmpty, name), giveBack(ch, name, q.Messages+len(got)))
	}
	if m.opts.beforeQuorumDelete != nil {
		if err := m.opts.beforeQuorumDelete(name); err != nil {
			return 0, err
		}
	}
	n, err := m.deleteQueue(name, false)
	if err != nil {
		return 0, fmt.Errorf("delete %q: %w", name, err)
	}
	late := drainUntilCancelled(deliveries, quorumDrain)
	var lost error
	if n > 0 {
		lost = fmt.Errorf("deleting quorum queue %q discarded %s that were ready in it although a consumer had room for them", name, Count(n))
	}
	if len(late) == 0 {
		return 0, lost
	}
	if beforeRescue != nil {
		if err := beforeRescue(); err != nil {
			return 0, errors.Join(lost, err)
		}
	}
	pub, err := m.channel()
	if err != nil {
		return 0, errors.Join(lost, fmt.Errorf("open a channel to move %s that reached %q during its deletion into %q: %w", Count(len(late)), name, rescue, err))
	}
	defer func() { _ = pub.Close() }()
	if err := pub.Confirm(false); err != nil {
		return 0, errors.Join(lost, fmt.Errorf("put channel in confirm mode: %w", err))
	}
	returns := pub.NotifyReturn(make(chan amqp.Return, len(late)))
	if err := m.publishConfirmed(pub, returns, rescue, late); err != nil {
		return 0, errors.Join(lost, fmt.Errorf("move %s that reached %q during its deletion into %q: %w", Count(len(late)), name, rescue, err))
	}
	m.res.Rescued += len(late)
	return len(late), lost
}

// giveBack returns every delivery ch holds to queue, and waits, for
// quorumDrain at most, until the queue counts at least ready messages ready
// again: a quorum queue applies a requeue after the channel's next reply, so
// that whoever looks next would find them missing.
func giveBack(ch *amqp.Channel, queue string, ready int) error {
	if err := ch.Cancel("queuey-migrate-delete", false); err != nil {
		return fmt.Errorf("stop reading %q (closing the channel gives its messages back): %w", queue, err)
	}
	if err := ch.Nack(0, true, true); err != nil {
		return fmt.Errorf("give the messages of %q back (closing the channel gives them back too): %w", queue, err)
	}
	deadline := time.Now().Add(quorumDrain)
	for {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil || q.Messages >= ready || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// receive collects deliveries until none arrives for quiet.
func receive(deliveries <-chan amqp.Delivery, quiet time.Duration) []amqp.Delivery {
	return collect(deliveries, quiet, 0)
}

// drainUntilCancelled collects deliveries until the broker cancels the
// consumer (its queue was deleted), within bound.
func drainUntilCancelled(deliveries <-chan amqp.Delivery, bound time.Duration) []amqp.Delivery {
	return collect(deliveries, 0, bound)
}

// collect takes deliveries until the channel closes, or none arrives for
// quiet (0: no such limit), or bound has passed since the call (0: none).
func collect(deliveries <-chan amqp.Delivery, quiet, bound time.Duration) []amqp.Delivery {
	var got []amqp.Delivery
	var deadline <-chan time.Time
	if bound > 0 {
		deadline = time.After(bound)
	}
	for {
		var idle <-chan time.Time
		if quiet > 0 {
			idle = time.After(quiet)
		}
		select {
		case d, ok := <-deliveries:
			if !ok {
				return got
			}
			got = append(got, d)
		case <-idle:
			return got
		case <-deadline:
			return got
		}
	}
}

// queueTypeOf is the queue type named in declaration arguments args: ""
// for a classic queue.
func queueTypeOf(args map[string]any) string {
	if t, _ := args[topology.ArgQueueType].(string); t == topology.QuorumQueueType {
		return t
	}
	return ""
}

// ErrQueueNotEmpty is DeleteIfEmpty finding messages in the queue.
var ErrQueueNotEmpty = errors.New("queue is not empty")

// DeleteIfEmpty deletes queue, declared with durable and args, only when it
// holds no message, over ac, and reports ErrQueueNotEmpty otherwise. A
// classic queue gets an if-empty delete. A quorum queue, which RabbitMQ
// refuses that for, is deleted as deleteQuorum does; whatever reached it
// during the delete is put back into it, declared again as it was, and the
// result is ErrQueueNotEmpty as if the delete had been refused.
func DeleteIfEmpty(ctx context.Context, ac *amqp.Connection, queue string, durable bool, args map[string]any) error {
	m := &migration{ctx: ctx, ac: ac, user: userOf(ac), queue: queue, opts: (*Options)(nil).resolved()}
	defer m.close()
	if queueTypeOf(args) != topology.QuorumQueueType {
		_, err := m.deleteQueue(queue, true)
		if isNotEmpty(err) {
			return fmt.Errorf("%w: %w", ErrQueueNotEmpty, err)
		}
		return err
	}
	n, err := m.deleteQuorumThen(queue, queue, func() error { return m.declare(queue, durable, args) })
	if errors.Is(err, errQuorumNotEmpty) {
		return fmt.Errorf("%w: %w", ErrQueueNotEmpty, err)
	}
	if err == nil && n > 0 {
		return fmt.Errorf("%w: %s reached quorum queue %q while it was deleted; it was declared again with them", ErrQueueNotEmpty, Count(n), queue)
	}
	return err
}
