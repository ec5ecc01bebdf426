package queuey

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

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
// channel is not shared with anything. A queue whose node is down is logged
// and left (nodeDownLogged).
func declareSet(ac *amqp.Connection, set QueueSet, logger *slog.Logger) error {
	ch, err := ac.Channel()
	if err != nil {
		return fmt.Errorf("queuey: open a channel to declare queue set %q: %w", set.Prefix, err)
	}
	defer func() { _ = ch.Close() }()
	for _, d := range setDeclarations(set) {
		err := declareQueue(ch, d.Name, d.Durable, d.Args)
		if nodeDownReason(err) != "" {
			// The broker closed the channel; the queue exists on a
			// node that is down (see nodeDownLogged).
			if logger != nil {
				nodeDownLogged(logger, d.Name, err)
			}
			if ch, err = ac.Channel(); err != nil {
				return fmt.Errorf("queuey: open a channel to declare queue set %q: %w", set.Prefix, err)
			}
			continue
		}
		if err != nil {
			return withVersion(ac, err)
		}
	}
	return nil
}

// setDeclarations lists the queues a set declares: for every queue of the
// set, in order, its work queue and then its dead-letter queue.
func setDeclarations(set QueueSet) []topology.Declaration {
	return topology.Declarations(set.topology())
}

// declareOnConnect is the onConnect of a producer or worker built from set:
// declareSet on the first connection, redeclareSet on every reconnect.
func declareOnConnect(set QueueSet, logger *slog.Logger) func(*amqp.Connection) error {
	connected := false
	return func(ac *amqp.Connection) error {
		if !connected {
			if err := declareSet(ac, set, logger); err != nil {
				return err
			}
			connected = true
			warnQuorumWithoutPriorities(serverVersion(ac), set, logger)
			return nil
		}
		return redeclareSet(ac, set, logger)
	}
}

// redeclareSet declares set again after a reconnect, around migrations,
// which replace a queue while processes that have it declared keep running:
//
//   - A queue whose migration queue (topology.MigrationName) exists is not
//     declared: it may be absent just now between its deletion and its
//     redeclaration, and declaring it with this process's arguments, the
//     old ones, would make the migration's redeclaration fail. The worker
//     resubscribes once the queue is back, and publishes retry while it is
//     unroutable (ProducerOptions.UnroutableRetry).
//   - A queue that exists with other arguments (a migration finished while
//     this process runs with the old configuration) is logged, not fatal:
//     the queue is there and takes publishes; failing would keep the
//     process reconnecting forever. The next start-up reports it as a
//     *PreconditionError.
//
// Residual risk: a migration that deletes the queue after the check and
// before the declaration finds it declared again with the old arguments;
// the migration moves its messages aside once more and retries.
func redeclareSet(ac *amqp.Connection, set QueueSet, logger *slog.Logger) error {
	for _, d := range setDeclarations(set) {
		migrating, err := queueExists(ac, topology.MigrationName(d.Name))
		if err != nil {
			return err
		}
		if migrating {
			logger.Info("queuey: queue is being migrated; not declaring it on reconnect", "queue", d.Name)
			continue
		}
		ch, err := ac.Channel()
		if err != nil {
			return fmt.Errorf("queuey: open a channel to declare queue set %q: %w", set.Prefix, err)
		}
		err = declareQueue(ch, d.Name, d.Durable, d.Args)
		_ = ch.Close()
		if errors.Is(err, ErrPreconditionFailed) {
			logger.Warn("queuey: queue exists with other arguments than this process declares, as after a migration; using it as it is", "queue", d.Name, "error", err)
			continue
		}
		if nodeDownLogged(logger, d.Name, err) {
			continue
		}
		if err != nil {
			return withVersion(ac, err)
		}
	}
	return nil
}

// nodeDownLogged logs a declaration of queue that failed because the
// queue's node is down, and reports whether it was one: the queue exists
// (RabbitMQ cannot declare it elsewhere meanwhile) and comes back with its
// node, and failing the connection for it would stop every other queue of
// the set too, reconnecting forever.
func nodeDownLogged(logger *slog.Logger, queue string, err error) bool {
	reason := nodeDownReason(err)
	if reason == "" {
		return false
	}
	logger.Warn("queuey: the queue's node is down, so it was not declared; a classic queue lives on one node, and its jobs wait there until the node is back (a quorum queue would have stayed up); publishes to it wait for the node", "queue", queue, "reason", reason)
	return true
}

// queueExists reports whether queue exists, by a passive declaration on a
// channel of its own: the broker closes the channel when it does not.
func queueExists(ac *amqp.Connection, queue string) (bool, error) {
	ch, err := ac.Channel()
	if err != nil {
		return false, fmt.Errorf("queuey: open a channel to check queue %q: %w", queue, err)
	}
	defer func() { _ = ch.Close() }()
	there, err := queueExistsOn(ch, queue)
	if err != nil {
		return false, fmt.Errorf("queuey: check queue %q: %w", queue, err)
	}
	return there, nil
}

// queueExistsOn reports whether queue exists, by a passive declaration on
// ch, which the broker closes when it does not: ch is spent either way.
func queueExistsOn(ch *amqp.Channel, queue string) (bool, error) {
	_, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return false, nil
	}
	return false, err
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
	if errors.As(err, &ae) && ae.Code == amqp.InternalError && strings.Contains(ae.Reason, transientFeature) {
		return &TransientRefusedError{Queue: queue, Detail: ae.Reason}
	}
	return fmt.Errorf("queuey: declare queue %q: %w", queue, err)
}

// transientFeature is the deprecated feature RabbitMQ names when it refuses
// a transient non-exclusive queue: "INTERNAL_ERROR - Feature
// `transient_nonexcl_queues` is deprecated. ...", a connection error (541).
const transientFeature = "transient_nonexcl_queues"

// withVersion adds the broker's version, from ac's server properties, to a
// *TransientRefusedError, which an operator reads next to the release notes.
func withVersion(ac *amqp.Connection, err error) error {
	var tr *TransientRefusedError
	if errors.As(err, &tr) && tr.Version == "" {
		tr.Version = serverVersion(ac)
	}
	return err
}

// warnQuorumWithoutPriorities logs, once per producer or pool, each quorum
// queue of set on a broker of version (RabbitMQ 3.x) whose quorum queues
// have no priorities, where deferred jobs wait behind the backlog. The
// provider's plan warns the same way.
func warnQuorumWithoutPriorities(version string, set QueueSet, logger *slog.Logger) {
	major, _, _ := strings.Cut(version, ".")
	if major != "3" {
		return
	}
	for _, q := range set.Queues {
		if q.QueueType == QueueTypeQuorum {
			logger.Warn("queuey: this broker's quorum queues have no priorities, so deferred jobs wait behind the backlog instead of going ahead of it; RabbitMQ 4.0 and later give quorum queues two priority levels",
				"queue", set.WorkQueue(q.Name), "rabbitmq_version", version)
		}
	}
}

// serverVersion is the "version" of ac's server properties, RabbitMQ's
// release ("4.0.5"), or "" when the broker did not send one.
func serverVersion(ac *amqp.Connection) string {
	if ac == nil {
		return ""
	}
	v, _ := ac.Properties["version"].(string)
	return v
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
