package migrate

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
)

// move moves every ready message of from into to and returns how many it
// moved. Each batch is published with confirms; the originals are
// acknowledged only once every message of the batch is confirmed and none
// was returned. Whatever is not acknowledged when move fails goes back to
// from when its channel closes.
func (m *migration) move(from, to string) (int, error) { return m.moveAtMost(from, to, -1) }

// moveAtMost is move, stopping after about limit messages (a whole batch
// more at most); limit < 0 means no limit.
func (m *migration) moveAtMost(from, to string, limit int) (int, error) {
	src, err := m.channel()
	if err != nil {
		return 0, err
	}
	defer func() { _ = src.Close() }()
	pub, err := m.channel()
	if err != nil {
		return 0, err
	}
	defer func() { _ = pub.Close() }()
	if err := pub.Confirm(false); err != nil {
		return 0, fmt.Errorf("put channel in confirm mode: %w", err)
	}
	returns := pub.NotifyReturn(make(chan amqp.Return, m.opts.Batch))

	moved := 0
	for limit < 0 || moved < limit {
		if err := m.ctx.Err(); err != nil {
			return moved, err
		}
		batch, err := m.take(src, from)
		if err != nil || len(batch) == 0 {
			return moved, err
		}
		if err := m.publishConfirmed(pub, returns, to, batch); err != nil {
			return moved, err
		}
		if m.opts.beforeAck != nil {
			if err := m.opts.beforeAck(from, len(batch)); err != nil {
				return moved, err
			}
		}
		if err := src.Ack(batch[len(batch)-1].DeliveryTag, true); err != nil {
			return moved, fmt.Errorf("acknowledge messages of %q: %w", from, err)
		}
		moved += len(batch)
	}
	return moved, nil
}

// take gets up to a batch of messages from queue, unacknowledged.
func (m *migration) take(src *amqp.Channel, queue string) ([]amqp.Delivery, error) {
	var batch []amqp.Delivery
	for len(batch) < m.opts.Batch {
		d, ok, err := src.Get(queue, false)
		if err != nil {
			return batch, fmt.Errorf("get from %q: %w", queue, err)
		}
		if !ok {
			break
		}
		batch = append(batch, d)
	}
	return batch, nil
}

// publishConfirmed publishes batch to queue on pub, a channel in confirm
// mode whose returns arrive on returns, and waits until the broker has
// confirmed every message; it fails if one was nacked or returned.
func (m *migration) publishConfirmed(pub *amqp.Channel, returns <-chan amqp.Return, queue string, batch []amqp.Delivery) error {
	dcs := make([]*amqp.DeferredConfirmation, len(batch))
	for i, d := range batch {
		dc, err := pub.PublishWithDeferredConfirmWithContext(m.ctx, "", queue, true, false, m.republishing(d))
		if err != nil {
			return fmt.Errorf("publish to %q: %w", queue, err)
		}
		dcs[i] = dc
	}
	for _, dc := range dcs {
		acked, err := dc.WaitContext(m.ctx)
		if err != nil {
			return err
		}
		if !acked {
			return fmt.Errorf("publish to %q: the broker did not confirm a message (nack or closed channel)", queue)
		}
	}
	// The broker sends a return before the confirm of the same message,
	// and amqp091-go hands it over before processing the confirm: every
	// return of this batch is already buffered.
	select {
	case r := <-returns:
		return fmt.Errorf("publish to %q: message %q was returned as unroutable (%s): the queue does not exist", queue, r.MessageId, r.ReplyText)
	default:
		return nil
	}
}

// republishing is d as the move publishes it: every property kept
// (divert.Republishing), except a user_id that names another user than the
// migration's, which RabbitMQ would refuse, closing the channel.
func (m *migration) republishing(d amqp.Delivery) amqp.Publishing {
	msg := divert.Republishing(d)
	if msg.UserId != "" && m.user != "" && msg.UserId != m.user {
		msg.UserId = ""
		m.res.UserIDsDropped++
	}
	return msg
}

// userOf is the user ac authenticated as with a username and password, or
// "" when it used another mechanism.
func userOf(ac *amqp.Connection) string {
	for _, a := range ac.Config.SASL {
		switch a := a.(type) {
		case *amqp.PlainAuth:
			return a.Username
		case *amqp.AMQPlainAuth:
			return a.Username
		}
	}
	return ""
}
