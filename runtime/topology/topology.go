// Package topology is queuey's model of the broker: the name of every queue of
// a queue set, the arguments each is declared with, how delays round to hold
// queues, and the checks a set must pass before anything is declared.
//
// The Terraform provider and the Go runtime both compute names and arguments
// here and nowhere else. RabbitMQ refuses a declaration whose arguments differ
// from the existing queue's (PRECONDITION_FAILED), so two computations that
// disagreed by one argument, or by an integer sent as a string, would deadlock
// the provider and the application against each other.
//
// The package does no I/O.
package topology

import (
	"strconv"
	"strings"
	"time"
)

// Queue arguments. ArgMessageTTL and ArgExpires have the values of
// amqp091-go's QueueMessageTTLArg and QueueTTLArg; this package spells them
// itself so that it imports nothing but the standard library.
const (
	// ArgMaxPriority makes a classic queue a priority queue with levels
	// 0..value. RabbitMQ delivers higher numbers first.
	ArgMaxPriority = "x-max-priority"
	// ArgMessageTTL expires messages after the value in milliseconds.
	ArgMessageTTL = "x-message-ttl"
	// ArgExpires deletes a queue that has been unused for the value in
	// milliseconds; a redeclaration counts as use.
	ArgExpires = "x-expires"
	// ArgDeadLetterExchange is where expired messages are republished.
	ArgDeadLetterExchange = "x-dead-letter-exchange"
	// ArgDeadLetterRoutingKey is the routing key expired messages are
	// republished with.
	ArgDeadLetterRoutingKey = "x-dead-letter-routing-key"
	// ArgQueueType is a queue's type. queuey sends it for quorum queues
	// only: a classic queue, the default, is declared without it. RabbitMQ
	// 4 reports it among the arguments of every classic queue, declared
	// with it or not.
	ArgQueueType = "x-queue-type"
	// ArgDeliveryLimit is how often a quorum queue delivers a message
	// before it drops it: a delivery carrying HeaderDeliveryCount equal to
	// the limit is its last.
	ArgDeliveryLimit = "x-delivery-limit"
)

// Queue types.
const (
	// DefaultQueueType is the type of a queue declared without
	// ArgQueueType: a classic queue, which lives on one node of a cluster.
	DefaultQueueType = "classic"
	// QuorumQueueType is a replicated queue: a majority of the cluster's
	// nodes hold each message, so it survives the loss of a minority. It
	// must be durable and takes no x-max-priority (RabbitMQ refuses it on
	// every version); RabbitMQ 4.0 and later give it two priority levels,
	// normal (0 to 4) and high (5 and above), without an argument, and 3.x
	// delivers in order whatever the priority.
	QuorumQueueType = "quorum"
)

// Delivery limits of quorum queues, explicit so that RabbitMQ 3.x (no
// default limit) and 4.x (a default of 20) behave alike.
const (
	// WorkDeliveryLimit is a quorum work queue's ArgDeliveryLimit.
	// Workers never let it be reached: a delivery whose
	// HeaderDeliveryCount is WorkDeliveryLimit-1 or more is dead-lettered
	// through the dead-letter queue, with queuey's headers, unrun
	// (LastDeliveries), since the broker would drop it after the next
	// return, having no dead-letter route.
	WorkDeliveryLimit = 20
	// UnlimitedDeliveries is the ArgDeliveryLimit of quorum dead-letter
	// and migration queues: reading dead letters gives each back with a
	// requeue, which counts as a delivery. It is the largest limit both
	// 3.x and 4.x take (-1 disables the limit on 4.x, but 3.x reads it as
	// "drop after the first return": measured on 3.10.8).
	UnlimitedDeliveries = 2147483647
)

// LastDeliveries reports whether a delivery of a quorum work queue that
// carries HeaderDeliveryCount count is among the last the broker makes
// before it drops the message: the worker must settle it without running
// it, by dead-lettering it, keeping one return to spare in case that
// fails.
func LastDeliveries(count int64) bool { return count >= WorkDeliveryLimit-1 }

// HeaderDeliveryCount is the header in which a quorum queue tells how often
// it delivered a message before (returns, requeues, lost consumers).
const HeaderDeliveryCount = "x-delivery-count"

// Message headers queuey sets.
const (
	// HeaderDeferrals counts how often a job was deferred.
	HeaderDeferrals = "x-deferrals"
	// HeaderAttempt is the 1-based attempt the message will be handled as.
	HeaderAttempt = "x-attempt"
	// HeaderDeathReason says why a job was dead-lettered.
	HeaderDeathReason = "x-death-reason"
	// HeaderOriginalQueue names the work queue a dead letter came from.
	HeaderOriginalQueue = "x-original-queue"
	// HeaderAttempts is how many attempts a dead letter had.
	HeaderAttempts = "x-attempts"
	// HeaderDeadLetteredAt is when a job was dead-lettered, in Unix
	// milliseconds. Dead letters written before it existed, or by the
	// original queuey, lack it.
	HeaderDeadLetteredAt = "x-queuey-dead-lettered-at"
	// HeaderReadyAt is when a job that went through a hold queue (a
	// delay, a retry, a deferral) was to be released from it, in Unix
	// milliseconds: the start of a run is measured against it, since the
	// envelope's enqueued_at_ms keeps the first enqueue.
	HeaderReadyAt = "x-queuey-ready-at"
	// HeaderDied counts the runs of a job that never settled: deliveries
	// the broker redelivered because the worker holding them died (or lost
	// its connection) first. Each one counted as an attempt.
	HeaderDied = "x-queuey-died"
)

const (
	// DeadSuffix follows a work queue's name to name its dead-letter queue.
	DeadSuffix = ".dead"
	// MigrationSuffix follows a work queue's name to name the temporary
	// queue its messages wait in while the queue is redeclared with other
	// arguments.
	MigrationSuffix = ".migrating"
	// DivertSuffix follows a work queue's name to name its divert queue:
	// see DivertName.
	DivertSuffix = MigrationSuffix + ".divert"
	// HoldInfix follows a work queue's name, before the TTL in milliseconds,
	// to name a hold queue.
	HoldInfix = ".deferred."

	// MaxNameBytes is the longest AMQP short string, and so the longest queue
	// name.
	MaxNameBytes = 255
	// maxTTLDigits is the widest TTL a hold-queue name can carry.
	maxTTLDigits = 10
	// MaxWorkNameBytes is the longest work-queue name whose every hold-queue
	// name still fits in MaxNameBytes.
	MaxWorkNameBytes = MaxNameBytes - len(HoldInfix) - maxTTLDigits

	// MaxHoldTTL is the longest delay a hold queue can carry, in
	// milliseconds: x-expires is twice the TTL and RabbitMQ caps it at
	// 2^32-1 ms.
	MaxHoldTTL int64 = 2147483647
	// MaxMessageTTL is the largest x-message-ttl RabbitMQ accepts, in
	// milliseconds.
	MaxMessageTTL int64 = 4294967295

	// DefaultMaxPriority is a work queue's x-max-priority unless configured.
	DefaultMaxPriority = 10
	// MaxPriorityLimit is the largest x-max-priority RabbitMQ accepts.
	MaxPriorityLimit = 255
	// DefaultGranularity is the step delays are rounded up to.
	DefaultGranularity = time.Second
)

// Queue is one logical queue of a set, with every default already resolved.
type Queue struct {
	// Name is the logical name; the work queue is prefix + "." + Name.
	Name string
	// MaxPriority is the work queue's x-max-priority; 0 means the queue is
	// not a priority queue and gets no such argument.
	MaxPriority int
	// MessageTTL is the work queue's x-message-ttl; 0 means none. It must be
	// a whole number of milliseconds.
	MessageTTL time.Duration
	// Durable says whether the work and hold queues survive a broker
	// restart. The dead-letter queue is durable whatever this says.
	Durable bool
	// Type is the type of the work, dead-letter and migration queues:
	// DefaultQueueType ("" is the same) or QuorumQueueType. Hold and divert
	// queues are classic whatever it says: a quorum queue's x-expires is
	// not renewed by a redeclare.
	Type string
}

// Quorum reports whether q's queues are quorum queues.
func (q Queue) Quorum() bool { return q.Type == QuorumQueueType }

// QueueType is q's type spelled out: DefaultQueueType for "".
func (q Queue) QueueType() string {
	if q.Type == "" {
		return DefaultQueueType
	}
	return q.Type
}

// DeferPriority is the AMQP priority a deferred job of q is published with,
// so that it goes ahead of the backlog: q's max priority on a classic
// queue, and on a quorum queue 5, the lowest of RabbitMQ 4's high priority
// (served two for one normal delivery, so ahead but not strictly first);
// 3.x quorum queues ignore it and deliver in order.
func DeferPriority(q Queue) uint8 {
	if q.Quorum() {
		return QuorumHighPriority
	}
	return uint8(q.MaxPriority)
}

// QuorumHighPriority is the lowest priority a RabbitMQ 4 quorum queue
// delivers as high.
const QuorumHighPriority = 5

// Set is a prefix and the logical queues under it.
type Set struct {
	Prefix string
	Queues []Queue
}

// WorkName is the name of the work queue of logical queue name under prefix.
func WorkName(prefix, name string) string { return prefix + "." + name }

// DeadName is the name of the dead-letter queue of work queue work.
func DeadName(work string) string { return work + DeadSuffix }

// MigrationName is the name of the temporary queue that holds work's
// messages during a migration. It is fixed, not random, so that an apply
// that died halfway finds it and finishes the move.
func MigrationName(work string) string { return work + MigrationSuffix }

// MigrationArgs are the arguments of the migration queue of a work queue of
// type queueType: none for a classic queue, so that it is a plain durable
// classic queue that accepts messages of any priority and keeps them across
// a broker restart; a quorum queue with UnlimitedDeliveries for a quorum
// one, so that the messages of a replicated queue stay replicated while
// they move.
func MigrationArgs(queueType string) map[string]any { return typeArgs(queueType) }

// typeArgs are the arguments of a queue of queueType that holds messages
// nobody handles (dead letters, migrating jobs): none for a classic queue.
func typeArgs(queueType string) map[string]any {
	if queueType != QuorumQueueType {
		return map[string]any{}
	}
	return map[string]any{ArgQueueType: QuorumQueueType, ArgDeliveryLimit: int64(UnlimitedDeliveries)}
}

// DivertName is the name of work's divert queue: a marker that holds nothing
// (DivertArgs). While it exists, queuey producers publish what they would
// publish to work into its migration queue (MigrationName) instead. The
// protocol between producers and a migration, with its timing, is stated in
// package internal/divert at the module's root.
func DivertName(work string) string { return work + DivertSuffix }

// DivertArgs are the arguments of a divert queue: it holds nothing and
// refuses every message with a basic.nack.
func DivertArgs() map[string]any {
	return map[string]any{"x-max-length": int64(0), "x-overflow": "reject-publish"}
}

// DivertDurable is the durability of every divert queue: a migration that
// dies with the divert queue declared is resumed by the next apply, and a
// broker restart meanwhile must not send producers back to a queue that may
// not exist.
const DivertDurable = true

// HoldName is the name of the hold queue that returns messages to work after
// ttlMs milliseconds.
func HoldName(work string, ttlMs int64) string {
	return work + HoldInfix + strconv.FormatInt(ttlMs, 10)
}

// ParseHoldName splits a hold-queue name into its work queue and TTL. It
// reports false for any name HoldName cannot produce.
func ParseHoldName(name string) (work string, ttlMs int64, ok bool) {
	i := strings.LastIndex(name, HoldInfix)
	if i <= 0 {
		return "", 0, false
	}
	digits := name[i+len(HoldInfix):]
	if digits == "" || len(digits) > maxTTLDigits || (len(digits) > 1 && digits[0] == '0') {
		return "", 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return "", 0, false
		}
	}
	ttl, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || ttl <= 0 || ttl > MaxHoldTTL {
		return "", 0, false
	}
	return name[:i], ttl, true
}

// WorkArgs are the arguments of q's work queue. Integers are int64: RabbitMQ
// treats integer widths alike, but a string "10" is a different argument.
func WorkArgs(q Queue) map[string]any {
	args := map[string]any{}
	if q.Quorum() {
		args[ArgQueueType] = QuorumQueueType
		args[ArgDeliveryLimit] = int64(WorkDeliveryLimit)
	}
	if q.MaxPriority > 0 {
		args[ArgMaxPriority] = int64(q.MaxPriority)
	}
	if q.MessageTTL > 0 {
		args[ArgMessageTTL] = q.MessageTTL.Milliseconds()
	}
	return args
}

// WithoutDefaults returns the arguments a broker reports for a queue less
// those that only restate a default, so that a queue reads the same on
// every RabbitMQ version: ArgQueueType "classic", which RabbitMQ 4 adds to
// every classic queue and 3.x does not. Any other type stays, and stays a
// difference. args itself is returned when there is nothing to drop.
func WithoutDefaults(args map[string]any) map[string]any {
	if t, ok := args[ArgQueueType]; !ok || t != DefaultQueueType {
		return args
	}
	out := make(map[string]any, len(args)-1)
	for k, v := range args {
		if k != ArgQueueType {
			out[k] = v
		}
	}
	return out
}

// DeadArgs are the arguments of the dead-letter queue of a work queue of
// type queueType: none for a classic queue; for a quorum queue, its type
// and UnlimitedDeliveries, since every read of the dead letters returns
// them with a requeue, which a quorum queue counts as a delivery.
func DeadArgs(queueType string) map[string]any { return typeArgs(queueType) }

// DeadDurable is the durability of every dead-letter queue: a dead letter
// lost on a broker restart is one nobody will ever know about.
const DeadDurable = true

// HoldArgs are the arguments of the hold queue of work for ttlMs. They follow
// from the name alone, so every process computes the same ones. Hold queues
// never get a priority argument.
func HoldArgs(work string, ttlMs int64) map[string]any {
	return map[string]any{
		ArgMessageTTL:           ttlMs,
		ArgDeadLetterExchange:   "",
		ArgDeadLetterRoutingKey: work,
		ArgExpires:              2 * ttlMs,
	}
}
