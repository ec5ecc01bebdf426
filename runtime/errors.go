package queuey

import (
	"errors"
	"fmt"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// Errors a caller can match with errors.Is, however deeply wrapped.
var (
	// ErrUnknownQueue: a delay or deferral onto a queue this process did not
	// declare. Without a declared work queue, the hold queue would have
	// nothing to dead-letter into.
	ErrUnknownQueue = errors.New("unknown queue")
	// ErrUnroutable: the broker returned a mandatory publish because no
	// queue by that name exists.
	ErrUnroutable = errors.New("job was unroutable")
	// ErrNacked: the broker refused to take responsibility for a publish.
	ErrNacked = errors.New("job was nacked by the broker")
	// ErrPreconditionFailed: a queue exists with other arguments than this
	// process declares. Matched by every *PreconditionError.
	ErrPreconditionFailed = errors.New("queue exists with other arguments")
	// ErrDelayTooLong: a delay that no hold queue can carry.
	ErrDelayTooLong = topology.ErrDelayTooLong
	// ErrNameTooLong: a work queue whose hold-queue names would exceed the
	// 255-byte AMQP limit.
	ErrNameTooLong = topology.ErrNameTooLong
	// ErrInvalidName: any name check of a queue set that failed.
	ErrInvalidName = topology.ErrInvalidName
	// ErrTransientRefused: the broker refuses transient (non-durable)
	// non-exclusive queues, as RabbitMQ 4.3 does by default, and this
	// process declares one. Matched by every *TransientRefusedError.
	ErrTransientRefused = errors.New("broker refuses transient queues")
	// ErrClosed: the producer or worker was closed.
	ErrClosed = errors.New("queuey: closed")
)

// PreconditionError is a declaration RabbitMQ refused because the queue
// already exists with other arguments. RabbitMQ cannot change a queue's
// arguments in place, so the fix is a migration, not a retry.
type PreconditionError struct {
	// Queue is the broker name of the queue.
	Queue string
	// Argument is the argument that differs, as named in the broker's reply
	// (e.g. "x-max-priority"), or empty when the reply did not say.
	Argument string
	// Detail is the broker's own reply text.
	Detail string
}

func (e *PreconditionError) Error() string {
	arg := "its arguments differ"
	if e.Argument != "" {
		arg = "argument " + e.Argument + " differs"
	}
	if _, _, hold := topology.ParseHoldName(e.Queue); hold {
		// Nothing migrates a hold queue: its arguments follow from its
		// name, so one that differs was made by hand or by other software.
		return fmt.Sprintf("hold queue %q already exists and %s from the arguments its name implies (%s); queuey declares hold queues itself: delete this one, after moving out any messages it holds, and the next delayed publish declares it correctly",
			e.Queue, arg, e.Detail)
	}
	return fmt.Sprintf("queue %q already exists and %s from this configuration (%s); RabbitMQ cannot change a queue's arguments in place: change the configuration to match, or migrate the queue (terraform apply with queuey_queue_set moves its messages losslessly)",
		e.Queue, arg, e.Detail)
}

// Is makes errors.Is(err, ErrPreconditionFailed) true.
func (e *PreconditionError) Is(target error) bool { return target == ErrPreconditionFailed }

// TransientRefusedError is a declaration of a transient (non-durable)
// queue that the broker refused because it does not permit transient
// non-exclusive queues: RabbitMQ deprecates them from 3.13 and refuses them
// by default from 4.3 (on 4.0–4.2 when deprecated_features.permit
// .transient_nonexcl_queues = false). The broker closes the whole
// connection for it, so a retry would only fail again.
type TransientRefusedError struct {
	// Queue is the broker name of the queue: a work queue of a NonDurable
	// QueueConfig, or one of its hold queues.
	Queue string
	// Version is the broker's version from its AMQP server properties, or
	// empty when it was not at hand.
	Version string
	// Detail is the broker's own reply text.
	Detail string
}

func (e *TransientRefusedError) Error() string {
	broker := "the broker"
	if e.Version != "" {
		broker = "RabbitMQ " + e.Version
	}
	what := "queue"
	if _, _, hold := topology.ParseHoldName(e.Queue); hold {
		what = "hold queue"
	}
	return fmt.Sprintf("queuey: %s refuses to declare %s %q: it is transient (the queue's QueueConfig sets NonDurable) and this broker does not permit transient non-exclusive queues, as RabbitMQ 4.3 and later do not by default. "+
		"Drop NonDurable from the queue's QueueConfig (and set durable = true on it in queuey_queue_set, whose apply migrates it without losing a message), "+
		"or permit such queues on every node with deprecated_features.permit.transient_nonexcl_queues = true in rabbitmq.conf (%s)",
		broker, what, e.Queue, e.Detail)
}

// Is makes a *TransientRefusedError match ErrTransientRefused.
func (e *TransientRefusedError) Is(target error) bool { return target == ErrTransientRefused }
