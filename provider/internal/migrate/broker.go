package migrate

// The migration's AMQP operations on queues: passive and plain declarations,
// deletions, and the channels they run on.

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// channel opens a channel for one operation. A refused declaration or
// deletion closes its channel, so none is shared across them.
func (m *migration) channel() (*amqp.Channel, error) {
	ch, err := m.ac.Channel()
	if err != nil {
		return nil, fmt.Errorf("open a channel: %w", err)
	}
	return ch, nil
}

// control returns the channel for declarations and deletions, opening one
// when there is none. A refused declaration or deletion closes its channel,
// so every failed operation drops it (done) and the next opens another;
// keeping it across successes saves a round trip between the deletion of q
// and its redeclaration.
func (m *migration) control() (*amqp.Channel, error) {
	if err := m.ctx.Err(); err != nil {
		return nil, err
	}
	if m.ctl != nil && !m.ctl.IsClosed() {
		return m.ctl, nil
	}
	ch, err := m.channel()
	if err != nil {
		return nil, err
	}
	m.ctl = ch
	return ch, nil
}

// done drops the control channel after an operation failed on it.
func (m *migration) done(err error) {
	if err != nil && m.ctl != nil {
		_ = m.ctl.Close()
		m.ctl = nil
	}
}

func (m *migration) close() {
	if m.ctl != nil {
		_ = m.ctl.Close()
		m.ctl = nil
	}
}

// exists reports whether name exists, by a passive declaration, and how many
// ready messages it holds.
func (m *migration) exists(name string) (bool, int, error) {
	ch, err := m.control()
	if err != nil {
		return false, 0, err
	}
	q, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
	m.done(err)
	if err == nil {
		return true, q.Messages, nil
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return false, 0, nil
	}
	return false, 0, fmt.Errorf("check whether queue %q exists: %w", name, err)
}

func (m *migration) declare(name string, durable bool, args map[string]any) error {
	ch, err := m.control()
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclare(name, durable, false, false, false, amqp.Table(args))
	m.done(err)
	if err != nil {
		return fmt.Errorf("declare queue %q: %w", name, err)
	}
	return nil
}

// declareTemp declares the temporary queue, a quorum queue when q's target
// is one (topology.MigrationArgs). One that exists with the other type, left
// by a migration that died on its way to another target, is used as it is:
// it only has to hold the messages until they move back.
func (m *migration) declareTemp() error {
	_, err := m.tempQueueType()
	return err
}

// tempQueueType declares the temporary queue, if it does not exist, and
// finds out its type: that of q's target, or else the other one, left by a
// migration that died on its way to another target. A declaration with
// the same arguments as the existing queue's changes nothing.
func (m *migration) tempQueueType() (string, error) {
	if m.tempKnown {
		return m.tempType, nil
	}
	target := queueTypeOf(m.args)
	other := topology.QuorumQueueType
	if target == other {
		other = ""
	}
	var errs []error
	for _, t := range []string{target, other} {
		err := m.declare(m.temp, true, topology.MigrationArgs(t))
		if err == nil {
			m.tempType, m.tempKnown = t, true
			return t, nil
		}
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
			return "", err
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("the temporary queue %q exists with arguments queuey does not give it; move its messages and delete it: %w", m.temp, errors.Join(errs...))
}

// declareTarget declares q with the target arguments. It reports false,
// without an error, when q exists with other arguments.
func (m *migration) declareTarget() (bool, error) {
	err := m.declare(m.queue, m.durable, m.args)
	if err == nil {
		return true, nil
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		return false, nil
	}
	return false, err
}

// delete deletes name, q or the temporary queue, if it is empty: with an
// if-empty delete for a classic queue, with deleteQuorum for a quorum one,
// which moves what reached it meanwhile into the other of the two.
func (m *migration) delete(name string) error {
	typ, rescue := m.qType, m.temp
	if name == m.temp {
		t, err := m.tempQueueType()
		if err != nil {
			return err
		}
		typ, rescue = t, m.queue
	}
	if typ == topology.QuorumQueueType {
		return m.deleteQuorum(name, rescue)
	}
	_, err := m.deleteQueue(name, true)
	return err
}

func (m *migration) deleteQueue(name string, ifEmpty bool) (int, error) {
	ch, err := m.control()
	if err != nil {
		return 0, err
	}
	n, err := ch.QueueDelete(name, false, ifEmpty, false)
	m.done(err)
	return n, err
}

// isNotEmpty reports whether err is the broker refusing an if-empty delete,
// or deleteQuorum finding the queue not empty.
func isNotEmpty(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed || errors.Is(err, errQuorumNotEmpty)
}
