package topology

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrInvalidName is matched by every *NameError.
var ErrInvalidName = errors.New("invalid queue name")

// ErrNameTooLong is matched by a *NameError for a name whose hold queues
// would not fit the 255-byte AMQP short string.
var ErrNameTooLong = errors.New("queue name too long")

// ErrInvalidPrefix is matched by a *NameError about the prefix itself.
var ErrInvalidPrefix = errors.New("invalid queue set prefix")

// ErrNoQueues is matched by the *NameError of a set without queues.
var ErrNoQueues = errors.New("queue set has no queues")

// ErrInvalidArgument is matched by every *ArgumentError.
var ErrInvalidArgument = errors.New("invalid queue argument")

// NameError says which name of a set was refused and why.
type NameError struct {
	// Queue is the logical queue the name belongs to; empty for the prefix
	// (and for a logical queue whose name is the empty string).
	Queue string
	// Reason says what is wrong and what to do.
	Reason  string
	tooLong bool
	// prefix and noQueues mark the errors that match ErrInvalidPrefix and
	// ErrNoQueues; both read "prefix: ...".
	prefix, noQueues bool
	// logical marks an error about a logical queue, so that one whose
	// name is empty is not reported as an error of the prefix.
	logical bool
}

func (e *NameError) Error() string {
	if e.Queue == "" && !e.logical {
		return "prefix: " + e.Reason
	}
	return fmt.Sprintf("queue %q: %s", e.Queue, e.Reason)
}

// Is makes errors.Is match ErrInvalidName, and ErrNameTooLong for length,
// ErrInvalidPrefix for the prefix and ErrNoQueues for an empty set.
func (e *NameError) Is(target error) bool {
	return target == ErrInvalidName || (e.tooLong && target == ErrNameTooLong) ||
		(e.prefix && target == ErrInvalidPrefix) || (e.noQueues && target == ErrNoQueues)
}

// The arguments an *ArgumentError can be about, as its Argument says them.
const (
	ArgumentMaxPriority = "max priority"
	ArgumentMessageTTL  = "message TTL"
	ArgumentQueueType   = "queue type"
)

// ArgumentError says which argument of a logical queue is out of range, and
// the value it refused, so that a caller can point at the setting without
// reading the message.
type ArgumentError struct {
	// Queue is the logical queue.
	Queue string
	// Argument is ArgumentMaxPriority, ArgumentMessageTTL or
	// ArgumentQueueType.
	Argument string
	// Value is the refused value: an int64 for the max priority, a
	// time.Duration for the message TTL, a string for the queue type.
	Value any
	// Reason is the value and what is wrong with it.
	Reason string
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("queue %q: %s %s", e.Queue, e.Argument, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidArgument) true.
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

// ValidatePrefix checks a prefix on its own.
func ValidatePrefix(prefix string) error {
	switch {
	case prefix == "":
		return &NameError{prefix: true, Reason: "must not be empty"}
	case strings.HasSuffix(prefix, "."):
		return &NameError{prefix: true, Reason: fmt.Sprintf("%q must not end in '.': queue names join it with '.' already", prefix)}
	case strings.HasPrefix(prefix+".", "amq."):
		// prefix "amq" counts too: its queues would be named "amq.<name>".
		return &NameError{prefix: true, Reason: fmt.Sprintf("%q must not start with \"amq.\" (nor be \"amq\"): RabbitMQ reserves queue names that start with \"amq.\"", prefix)}
	}
	return nil
}

// ValidateName checks the logical name of one queue under prefix, including
// the length of its longest possible hold-queue name.
func ValidateName(prefix, name string) error {
	if name == "" {
		return &NameError{Queue: name, logical: true, Reason: "the logical name must not be empty"}
	}
	work := WorkName(prefix, name)
	if len(work) > MaxWorkNameBytes {
		return &NameError{Queue: name, tooLong: true, Reason: fmt.Sprintf(
			"work queue %q is %d bytes; its longest hold-queue name (%q + %q + 10 digits) must fit the %d-byte AMQP limit, so the work queue may have at most %d bytes: shorten the prefix or the name",
			truncate(work), len(work), truncate(work), HoldInfix, MaxNameBytes, MaxWorkNameBytes)}
	}
	return nil
}

// ValidateQueue checks the arguments of one logical queue.
func ValidateQueue(q Queue) error {
	if err := ValidateMaxPriority(q.Name, int64(q.MaxPriority)); err != nil {
		return err
	}
	if err := ValidateQueueType(q.Name, q.Type, int64(q.MaxPriority), q.Durable); err != nil {
		return err
	}
	ttl := func(reason string) error {
		return &ArgumentError{Queue: q.Name, Argument: ArgumentMessageTTL, Value: q.MessageTTL, Reason: reason}
	}
	if q.MessageTTL < 0 {
		return ttl(fmt.Sprintf("%s is negative: leave it unset for no TTL", q.MessageTTL))
	}
	if q.MessageTTL%time.Millisecond != 0 {
		return ttl(fmt.Sprintf("%s is not a whole number of milliseconds, the unit RabbitMQ counts in", q.MessageTTL))
	}
	if q.MessageTTL.Milliseconds() > MaxMessageTTL {
		return ttl(fmt.Sprintf("%s is longer than RabbitMQ's limit of %d ms (%s)", FormatDuration(q.MessageTTL), MaxMessageTTL, FormatDuration(time.Duration(MaxMessageTTL)*time.Millisecond)))
	}
	return nil
}

// ValidateMaxPriority checks the max priority of logical queue name. It
// takes an int64 so that a caller holding a wider value than Queue's int
// (a Terraform number) has it checked, and reported, as written.
func ValidateMaxPriority(name string, p int64) error {
	if p < 0 || p > MaxPriorityLimit {
		return &ArgumentError{Queue: name, Argument: ArgumentMaxPriority, Value: p,
			Reason: fmt.Sprintf("%d is out of range: use 1 to %d, or 0 for a queue without priorities", p, MaxPriorityLimit)}
	}
	return nil
}

// ValidateQueueType checks the queue type of logical queue name against its
// max priority and durability, which a quorum queue restricts.
func ValidateQueueType(name, queueType string, maxPriority int64, durable bool) error {
	switch queueType {
	case "", DefaultQueueType:
		return nil
	case QuorumQueueType:
	default:
		return &ArgumentError{Queue: name, Argument: ArgumentQueueType, Value: queueType,
			Reason: fmt.Sprintf("%q is not a queue type queuey declares: use %q (the default) or %q", queueType, DefaultQueueType, QuorumQueueType)}
	}
	if maxPriority > 0 {
		return &ArgumentError{Queue: name, Argument: ArgumentMaxPriority, Value: maxPriority,
			Reason: fmt.Sprintf("%d is refused on a quorum queue: RabbitMQ refuses x-max-priority on quorum queues; "+
				"RabbitMQ 4.0 and later give them two priority levels without it, and 3.x none. Leave the max priority unset (or 0) for a quorum queue, or make it classic", maxPriority)}
	}
	if !durable {
		return &ArgumentError{Queue: name, Argument: ArgumentQueueType, Value: queueType,
			Reason: "quorum needs a durable queue: quorum queues are always durable; make the queue durable, or classic"}
	}
	return nil
}

// Validate runs every check on a set and returns all that failed, joined, or
// nil. Nothing may be declared for a set that fails: a half-declared set is
// harder to fix than one that never started.
func Validate(s Set) error {
	var errs []error
	if err := ValidatePrefix(s.Prefix); err != nil {
		errs = append(errs, err)
	}
	if len(s.Queues) == 0 {
		errs = append(errs, &NameError{noQueues: true, Reason: fmt.Sprintf("the set %q has no queues: declare at least one", s.Prefix)})
	}
	// owner maps every broker name the set will use to the logical queue
	// that uses it, so that a collision can name both.
	owner := map[string]string{}
	for _, q := range s.Queues {
		if err := ValidateName(s.Prefix, q.Name); err != nil {
			errs = append(errs, err)
		}
		if err := ValidateQueue(q); err != nil {
			errs = append(errs, err)
		}
		work := WorkName(s.Prefix, q.Name)
		for _, name := range []string{work, DeadName(work), MigrationName(work), DivertName(work)} {
			if other, dup := owner[name]; dup {
				if other == q.Name {
					errs = append(errs, &NameError{Queue: q.Name, logical: true, Reason: "is listed twice"})
				} else {
					errs = append(errs, &NameError{Queue: q.Name, logical: true, Reason: fmt.Sprintf("collides with queue %q: both would use the broker queue %q; rename one", other, name)})
				}
				break
			}
			owner[name] = q.Name
		}
	}
	// A work queue named like another's hold queue would be declared with
	// the wrong arguments the first time a delay needed it.
	for _, q := range s.Queues {
		work := WorkName(s.Prefix, q.Name)
		if held, _, ok := ParseHoldName(work); ok {
			// owner also holds dead-letter queues, which have no hold
			// queues: only a work queue's name can be held.
			if other, in := owner[held]; in && WorkName(s.Prefix, other) == held {
				errs = append(errs, &NameError{Queue: q.Name, logical: true, Reason: fmt.Sprintf("collides with a hold queue of queue %q; rename it", other)})
			}
		}
	}
	return errors.Join(errs...)
}

// truncate keeps error messages readable when a name is hundreds of bytes.
func truncate(s string) string {
	if len(s) <= 40 {
		return s
	}
	return s[:37] + "..."
}
