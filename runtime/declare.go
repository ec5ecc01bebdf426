package queuey

import (
	"errors"
	"fmt"
	"regexp"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// declareSet declares the work queue and the dead-letter queue of every queue
// of set on a channel of its own, which it closes. It is the onConnect of a
// producer (and of a worker) built from a set, so it runs on the first
// connection and again on every reconnect. The set must already be valid.
//
// A queue that exists with other arguments fails the declaration with a
// *PreconditionError; RabbitMQ closes the channel then, which is why the
// channel is not shared with anything.
func declareSet(ac *amqp.Connection, set QueueSet) error {
	ch, err := ac.Channel()
	if err != nil {
		return fmt.Errorf("queuey: open a channel to declare queue set %q: %w", set.Prefix, err)
	}
	defer func() { _ = ch.Close() }()
	for _, q := range set.Queues {
		tq := q.topology()
		work := set.WorkQueue(q.Name)
		if err := declareQueue(ch, work, tq.Durable, topology.WorkArgs(tq)); err != nil {
			return err
		}
		if err := declareQueue(ch, topology.DeadName(work), topology.DeadDurable, topology.DeadArgs()); err != nil {
			return err
		}
	}
	return nil
}

// declareQueue declares one queue with the flags every queuey queue has:
// not passive, not exclusive, not auto-delete, waiting for the reply.
func declareQueue(ch *amqp.Channel, name string, durable bool, args map[string]any) error {
	_, err := ch.QueueDeclare(name, durable, false, false, false, amqp.Table(args))
	if err != nil {
		return declareError(name, err)
	}
	return nil
}

// declareError turns a refused declaration of queue into a *PreconditionError
// when the broker said PRECONDITION_FAILED, and wraps anything else with the
// queue's name.
func declareError(queue string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		return &PreconditionError{Queue: queue, Argument: inequivalentArg(ae.Reason), Detail: ae.Reason}
	}
	return fmt.Errorf("queuey: declare queue %q: %w", queue, err)
}

// inequivalentArgRE matches RabbitMQ's reply to a redeclaration with other
// arguments or flags, e.g. "PRECONDITION_FAILED - inequivalent arg
// 'x-max-priority' for queue 'a.b' in vhost '/': received the value '10' of
// type 'signedint' but current is none". Flags are reported the same way
// ("inequivalent arg 'durable'").
var inequivalentArgRE = regexp.MustCompile(`inequivalent arg '([^']*)'`)

// inequivalentArg returns the argument a PRECONDITION_FAILED reply names, or
// "" when it names none.
func inequivalentArg(reason string) string {
	m := inequivalentArgRE.FindStringSubmatch(reason)
	if m == nil {
		return ""
	}
	return m[1]
}
