package topology_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// joined returns the errors errors.Join put together, or err alone.
func joined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// name returns a string of n bytes.
func name(n int) string { return strings.Repeat("n", n) }

func TestValidatePrefix(t *testing.T) {
	t.Parallel()

	valid := []string{"myapp", "a", "a.b", "my-app_1", "aq-example", "ünï", "amqp", "amqx.y", "x.amq", ".a", "a..b"}
	for _, p := range valid {
		t.Run("valid/"+p, func(t *testing.T) {
			t.Parallel()
			if err := topology.ValidatePrefix(p); err != nil {
				t.Fatalf("ValidatePrefix(%q) = %v, want nil", p, err)
			}
		})
	}

	tests := []struct {
		prefix  string
		mention string
	}{
		{"", "must not be empty"},
		{".", "must not end in '.'"},
		{"a.", "must not end in '.'"},
		{"a..", "must not end in '.'"},
		{"amq.", "amq."},
		{"amq.x", "amq."},
		{"amq.x.y", "amq."},
		// Its queues would be named amq.<name>, which RabbitMQ refuses.
		{"amq", "amq."},
	}
	for _, tt := range tests {
		t.Run("invalid/"+tt.prefix, func(t *testing.T) {
			t.Parallel()
			err := topology.ValidatePrefix(tt.prefix)
			if err == nil {
				t.Fatalf("ValidatePrefix(%q) = nil, want an error", tt.prefix)
			}
			if !errors.Is(err, topology.ErrInvalidName) {
				t.Fatalf("ValidatePrefix(%q) = %v, want errors.Is ErrInvalidName", tt.prefix, err)
			}
			if errors.Is(err, topology.ErrNameTooLong) || errors.Is(err, topology.ErrInvalidArgument) {
				t.Fatalf("ValidatePrefix(%q) = %v, matches an unrelated sentinel", tt.prefix, err)
			}
			var ne *topology.NameError
			if !errors.As(err, &ne) || ne.Queue != "" {
				t.Fatalf("ValidatePrefix(%q) = %#v, want a *NameError with no queue", tt.prefix, err)
			}
			if !strings.HasPrefix(err.Error(), "prefix: ") || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("ValidatePrefix(%q) = %q, want \"prefix: ...%s...\"", tt.prefix, err, tt.mention)
			}
		})
	}
}

func TestValidateName(t *testing.T) {
	t.Parallel()

	// "p" + "." + name: 2 bytes before the name.
	const room = topology.MaxWorkNameBytes - 2
	valid := []struct {
		why          string
		prefix, name string
	}{
		{"short", "myapp", "emails"},
		{"dotted", "myapp", "a.b"},
		{"exactly MaxWorkNameBytes", "p", name(room)},
		{"long prefix, one-byte name", name(topology.MaxWorkNameBytes - 2), "x"},
		{"multi-byte at the limit", "p", strings.Repeat("é", room/2) + "a"},
	}
	for _, tt := range valid {
		t.Run("valid/"+tt.why, func(t *testing.T) {
			t.Parallel()
			if err := topology.ValidateName(tt.prefix, tt.name); err != nil {
				t.Fatalf("ValidateName(%q, %q) = %v, want nil", tt.prefix, tt.name, err)
			}
			work := topology.WorkName(tt.prefix, tt.name)
			if n := len(topology.HoldName(work, topology.MaxHoldTTL)); n > topology.MaxNameBytes {
				t.Fatalf("longest hold name of accepted %q is %d bytes, above %d", work, n, topology.MaxNameBytes)
			}
		})
	}

	tooLong := []struct {
		why          string
		prefix, name string
	}{
		{"one byte over", "p", name(room + 1)},
		{"long prefix pushes over", name(topology.MaxWorkNameBytes - 1), "x"},
		{"255 bytes", "p", name(topology.MaxNameBytes - 2)},
		{"far over", "p", name(10000)},
		// 117 runes, far under 235 characters, but 234 bytes of name.
		{"multi-byte counted in bytes", "p", strings.Repeat("é", room/2+1)},
		{"4-byte runes", "p", strings.Repeat("😀", 59)},
	}
	for _, tt := range tooLong {
		t.Run("too long/"+tt.why, func(t *testing.T) {
			t.Parallel()
			err := topology.ValidateName(tt.prefix, tt.name)
			if err == nil {
				t.Fatalf("ValidateName(%q, %q) = nil, want too long", tt.prefix, tt.name)
			}
			if !errors.Is(err, topology.ErrNameTooLong) || !errors.Is(err, topology.ErrInvalidName) {
				t.Fatalf("ValidateName = %v, want errors.Is ErrNameTooLong and ErrInvalidName", err)
			}
			var ne *topology.NameError
			if !errors.As(err, &ne) || ne.Queue != tt.name {
				t.Fatalf("ValidateName = %#v, want a *NameError for queue %q", err, tt.name)
			}
			msg := err.Error()
			for _, want := range []string{"255", "235", "shorten"} {
				if !strings.Contains(msg, want) {
					t.Fatalf("ValidateName error %q does not mention %q", msg, want)
				}
			}
			// The name is quoted once in full (it says which queue); the
			// rest of the message stays short however long the name is.
			if len(msg) > len(tt.name)+400 {
				t.Fatalf("ValidateName error is %d bytes long", len(msg))
			}
		})
	}

	// The boundary computed from HoldName itself, not from the constant.
	for n := 1; n < 300; n++ {
		work := topology.WorkName("p", name(n))
		fits := len(topology.HoldName(work, topology.MaxHoldTTL)) <= topology.MaxNameBytes
		err := topology.ValidateName("p", name(n))
		if fits != (err == nil) {
			t.Fatalf("name of %d bytes: hold name fits = %v, ValidateName = %v", n, fits, err)
		}
	}

	t.Run("empty", func(t *testing.T) {
		t.Parallel()
		err := topology.ValidateName("p", "")
		if err == nil {
			t.Fatalf("ValidateName(p, \"\") = nil, want an error")
		}
		if !errors.Is(err, topology.ErrInvalidName) || errors.Is(err, topology.ErrNameTooLong) {
			t.Fatalf("ValidateName(p, \"\") = %v, want ErrInvalidName only", err)
		}
		// The prefix is fine; the message must not blame it.
		if strings.HasPrefix(err.Error(), "prefix") || !strings.Contains(err.Error(), "empty") {
			t.Fatalf("ValidateName(p, \"\") = %q, want it to say a queue name is empty, not the prefix", err)
		}
	})
}

func TestValidateQueue(t *testing.T) {
	t.Parallel()

	const ms = time.Millisecond
	valid := []struct {
		why string
		q   topology.Queue
	}{
		{"zero value", topology.Queue{Name: "a"}},
		{"default priority", topology.Queue{Name: "a", MaxPriority: topology.DefaultMaxPriority, Durable: true}},
		{"priority 1", topology.Queue{Name: "a", MaxPriority: 1}},
		{"priority 255", topology.Queue{Name: "a", MaxPriority: 255}},
		{"ttl 1ms", topology.Queue{Name: "a", MessageTTL: ms}},
		{"ttl 1 day", topology.Queue{Name: "a", MessageTTL: 24 * time.Hour}},
		{"ttl at RabbitMQ's limit", topology.Queue{Name: "a", MessageTTL: time.Duration(topology.MaxMessageTTL) * ms}},
	}
	for _, tt := range valid {
		t.Run("valid/"+tt.why, func(t *testing.T) {
			t.Parallel()
			if err := topology.ValidateQueue(tt.q); err != nil {
				t.Fatalf("ValidateQueue(%+v) = %v, want nil", tt.q, err)
			}
		})
	}

	invalid := []struct {
		why      string
		q        topology.Queue
		argument string
		mention  string
	}{
		{"priority -1", topology.Queue{Name: "a", MaxPriority: -1}, "max priority", "-1 is out of range"},
		{"priority 256", topology.Queue{Name: "a", MaxPriority: 256}, "max priority", "256 is out of range"},
		{"priority min int", topology.Queue{Name: "a", MaxPriority: math.MinInt}, "max priority", "out of range"},
		{"priority max int", topology.Queue{Name: "a", MaxPriority: math.MaxInt}, "max priority", "out of range"},
		{"ttl -1ns", topology.Queue{Name: "a", MessageTTL: -1}, "message TTL", "negative"},
		{"ttl -1ms", topology.Queue{Name: "a", MessageTTL: -ms}, "message TTL", "negative"},
		{"ttl 1ns", topology.Queue{Name: "a", MessageTTL: 1}, "message TTL", "whole number of milliseconds"},
		{"ttl 1.5ms", topology.Queue{Name: "a", MessageTTL: 1500 * time.Microsecond}, "message TTL", "whole number of milliseconds"},
		{"ttl 1ms+1ns", topology.Queue{Name: "a", MessageTTL: ms + 1}, "message TTL", "whole number of milliseconds"},
		{"ttl one ms over", topology.Queue{Name: "a", MessageTTL: time.Duration(topology.MaxMessageTTL+1) * ms}, "message TTL", "4294967295 ms"},
		{"ttl 50 days", topology.Queue{Name: "a", MessageTTL: 50 * 24 * time.Hour}, "message TTL", "limit"},
		{"ttl largest whole ms", topology.Queue{Name: "a", MessageTTL: math.MaxInt64 / ms * ms}, "message TTL", "limit"},
	}
	for _, tt := range invalid {
		t.Run("invalid/"+tt.why, func(t *testing.T) {
			t.Parallel()
			err := topology.ValidateQueue(tt.q)
			if err == nil {
				t.Fatalf("ValidateQueue(%+v) = nil, want an error", tt.q)
			}
			if !errors.Is(err, topology.ErrInvalidArgument) {
				t.Fatalf("ValidateQueue(%+v) = %v, want errors.Is ErrInvalidArgument", tt.q, err)
			}
			if errors.Is(err, topology.ErrInvalidName) {
				t.Fatalf("ValidateQueue(%+v) = %v, also matches ErrInvalidName", tt.q, err)
			}
			var ae *topology.ArgumentError
			if !errors.As(err, &ae) {
				t.Fatalf("ValidateQueue(%+v) = %T, want *ArgumentError", tt.q, err)
			}
			if ae.Queue != tt.q.Name || ae.Argument != tt.argument {
				t.Fatalf("ArgumentError = {Queue: %q, Argument: %q}, want {%q, %q}", ae.Queue, ae.Argument, tt.q.Name, tt.argument)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, `queue "a": `+tt.argument+" ") || !strings.Contains(msg, tt.mention) {
				t.Fatalf("ValidateQueue error = %q, want `queue \"a\": %s ...%s...`", msg, tt.argument, tt.mention)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()

	q := func(name string) topology.Queue {
		return topology.Queue{Name: name, MaxPriority: topology.DefaultMaxPriority, Durable: true}
	}
	valid := []struct {
		why string
		set topology.Set
	}{
		{"one queue", topology.Set{Prefix: "myapp", Queues: []topology.Queue{q("emails")}}},
		{"several", topology.Set{Prefix: "myapp", Queues: []topology.Queue{q("emails"), q("reports"), q("billing")}}},
		{"dotted names", topology.Set{Prefix: "myapp", Queues: []topology.Queue{q("a"), q("a.b"), q("a.b.c")}}},
		{"names ending in dead but no x", topology.Set{Prefix: "p", Queues: []topology.Queue{q("x.dead")}}},
		{"names like a hold queue with no owner", topology.Set{Prefix: "p", Queues: []topology.Queue{q("x.deferred.500")}}},
		{"hold-like name with leading zero", topology.Set{Prefix: "p", Queues: []topology.Queue{q("x"), q("x.deferred.0500")}}},
		{"hold-like name with zero TTL", topology.Set{Prefix: "p", Queues: []topology.Queue{q("x"), q("x.deferred.0")}}},
		{"hold-like name with TTL over the ceiling", topology.Set{Prefix: "p", Queues: []topology.Queue{q("x"), q("x.deferred.2147483648")}}},
		{"deadish suffix", topology.Set{Prefix: "p", Queues: []topology.Queue{q("x"), q("x.deadly"), q("xdead")}}},
		// Dead-letter queues have no hold queues: nothing delays onto them.
		{"hold-like name of a dead queue", topology.Set{Prefix: "p", Queues: []topology.Queue{q("x"), q("x.dead.deferred.500")}}},
		{"longest name", topology.Set{Prefix: "p", Queues: []topology.Queue{q(name(topology.MaxWorkNameBytes - 2))}}},
		{"all argument limits", topology.Set{Prefix: "p", Queues: []topology.Queue{
			{Name: "a", MaxPriority: 255, MessageTTL: time.Duration(topology.MaxMessageTTL) * time.Millisecond},
			{Name: "b"},
		}}},
	}
	for _, tt := range valid {
		t.Run("valid/"+tt.why, func(t *testing.T) {
			t.Parallel()
			if err := topology.Validate(tt.set); err != nil {
				t.Fatalf("Validate(%+v) = %v, want nil", tt.set, err)
			}
		})
	}

	invalid := []struct {
		why  string
		set  topology.Set
		is   []error
		isnt []error
		// mention holds substrings the message must contain.
		mention []string
		count   int
	}{
		{
			why: "empty prefix", set: topology.Set{Prefix: "", Queues: []topology.Queue{q("a")}},
			is: []error{topology.ErrInvalidName}, isnt: []error{topology.ErrNameTooLong, topology.ErrInvalidArgument},
			mention: []string{"prefix: must not be empty"}, count: 1,
		},
		{
			why: "prefix ending in dot", set: topology.Set{Prefix: "myapp.", Queues: []topology.Queue{q("a")}},
			is: []error{topology.ErrInvalidName}, mention: []string{`"myapp."`, "must not end in '.'"}, count: 1,
		},
		{
			why: "amq. prefix", set: topology.Set{Prefix: "amq.myapp", Queues: []topology.Queue{q("a")}},
			is: []error{topology.ErrInvalidName}, mention: []string{"amq."}, count: 1,
		},
		{
			why: "amq prefix", set: topology.Set{Prefix: "amq", Queues: []topology.Queue{q("a")}},
			is: []error{topology.ErrInvalidName}, mention: []string{"amq."}, count: 1,
		},
		{
			why: "no queues", set: topology.Set{Prefix: "myapp"},
			is: []error{topology.ErrInvalidName}, mention: []string{`"myapp"`, "no queues"}, count: 1,
		},
		{
			why: "empty queue list", set: topology.Set{Prefix: "myapp", Queues: []topology.Queue{}},
			is: []error{topology.ErrInvalidName}, mention: []string{"no queues"}, count: 1,
		},
		{
			why: "empty logical name", set: topology.Set{Prefix: "myapp", Queues: []topology.Queue{q("a"), q("")}},
			is: []error{topology.ErrInvalidName}, isnt: []error{topology.ErrNameTooLong},
			mention: []string{"empty"}, count: 1,
		},
		{
			why: "duplicate logical names", set: topology.Set{Prefix: "myapp", Queues: []topology.Queue{q("a"), q("b"), q("a")}},
			is: []error{topology.ErrInvalidName}, mention: []string{`queue "a"`, "twice"}, count: 1,
		},
		{
			why: "x.dead after x", set: topology.Set{Prefix: "p", Queues: []topology.Queue{q("x"), q("x.dead")}},
			is: []error{topology.ErrInvalidName}, mention: []string{`queue "x.dead"`, `"x"`, `"p.x.dead"`}, count: 1,
		},
		{
			why: "x.dead before x", set: topology.Set{Prefix: "p", Queues: []topology.Queue{q("x.dead"), q("x")}},
			is: []error{topology.ErrInvalidName}, mention: []string{`queue "x"`, `"x.dead"`, `"p.x.dead"`}, count: 1,
		},
		{
			why: "hold queue of another", set: topology.Set{Prefix: "p", Queues: []topology.Queue{q("x"), q("x.deferred.500")}},
			is: []error{topology.ErrInvalidName}, mention: []string{`queue "x.deferred.500"`, `hold queue of queue "x"`}, count: 1,
		},
		{
			why: "hold queue of another listed first", set: topology.Set{Prefix: "p", Queues: []topology.Queue{q("x.deferred.500"), q("x")}},
			is: []error{topology.ErrInvalidName}, mention: []string{`queue "x.deferred.500"`, `hold queue of queue "x"`}, count: 1,
		},
		{
			why: "hold queue at the ceiling", set: topology.Set{Prefix: "p", Queues: []topology.Queue{q("x"), q("x.deferred.2147483647")}},
			is: []error{topology.ErrInvalidName}, mention: []string{"hold queue"}, count: 1,
		},
		{
			why: "name one byte too long", set: topology.Set{Prefix: "p", Queues: []topology.Queue{q(name(topology.MaxWorkNameBytes - 1))}},
			is: []error{topology.ErrInvalidName, topology.ErrNameTooLong}, count: 1,
		},
		{
			why: "priority out of range", set: topology.Set{Prefix: "p", Queues: []topology.Queue{{Name: "a", MaxPriority: 256}}},
			is: []error{topology.ErrInvalidArgument}, isnt: []error{topology.ErrInvalidName},
			mention: []string{`queue "a": max priority 256`}, count: 1,
		},
		{
			why: "negative TTL", set: topology.Set{Prefix: "p", Queues: []topology.Queue{{Name: "a", MessageTTL: -time.Second}}},
			is: []error{topology.ErrInvalidArgument}, mention: []string{"negative"}, count: 1,
		},
		{
			why: "every kind at once",
			set: topology.Set{Prefix: "amq.", Queues: []topology.Queue{
				{Name: "", MaxPriority: 10},
				{Name: name(300), MaxPriority: -1},
				{Name: "x", MessageTTL: time.Microsecond},
				{Name: "x.dead"},
				{Name: "x.deferred.1000"},
				{Name: "y"},
				{Name: "y"},
			}},
			is: []error{topology.ErrInvalidName, topology.ErrNameTooLong, topology.ErrInvalidArgument},
			mention: []string{
				"prefix: ", "empty", "shorten", "max priority -1", "whole number of milliseconds",
				`queue "x.dead": collides with queue "x"`, `queue "x.deferred.1000": collides with a hold queue of queue "x"`,
				`queue "y": is listed twice`,
			},
			// prefix, empty name, too long, priority, ttl, x.dead, hold, twice.
			count: 8,
		},
	}
	for _, tt := range invalid {
		t.Run("invalid/"+tt.why, func(t *testing.T) {
			t.Parallel()
			err := topology.Validate(tt.set)
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want an error", tt.set)
			}
			for _, target := range tt.is {
				if !errors.Is(err, target) {
					t.Fatalf("Validate error = %v, want errors.Is %v", err, target)
				}
			}
			for _, target := range tt.isnt {
				if errors.Is(err, target) {
					t.Fatalf("Validate error = %v, matches %v", err, target)
				}
			}
			msg := err.Error()
			for _, m := range tt.mention {
				if !strings.Contains(msg, m) {
					t.Fatalf("Validate error = %q, want it to mention %q", msg, m)
				}
			}
			errs := joined(err)
			if len(errs) != tt.count {
				t.Fatalf("Validate reported %d errors, want %d:\n%v", len(errs), tt.count, err)
			}
			// Each joined error is one of the package's typed errors, so a
			// caller can tell names from arguments.
			for _, e := range errs {
				var ne *topology.NameError
				var ae *topology.ArgumentError
				if !errors.As(e, &ne) && !errors.As(e, &ae) {
					t.Fatalf("Validate reported %T %v, want *NameError or *ArgumentError", e, e)
				}
			}
		})
	}
}

func TestNameErrorIs(t *testing.T) {
	t.Parallel()

	plain := &topology.NameError{Queue: "a", Reason: "bad"}
	if !errors.Is(plain, topology.ErrInvalidName) {
		t.Fatalf("NameError does not match ErrInvalidName")
	}
	if errors.Is(plain, topology.ErrNameTooLong) {
		t.Fatalf("a NameError not about length matches ErrNameTooLong")
	}
	if got, want := plain.Error(), `queue "a": bad`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got, want := (&topology.NameError{Reason: "bad"}).Error(), "prefix: bad"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	ae := &topology.ArgumentError{Queue: "a", Argument: "max priority", Reason: "is bad"}
	if got, want := ae.Error(), `queue "a": max priority is bad`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if errors.Is(ae, topology.ErrInvalidName) || !errors.Is(ae, topology.ErrInvalidArgument) {
		t.Fatalf("ArgumentError matches the wrong sentinels")
	}
}

func TestValidateMigrationQueueCollision(t *testing.T) {
	t.Parallel()

	err := topology.Validate(topology.Set{Prefix: "p", Queues: []topology.Queue{{Name: "x"}, {Name: "x.migrating"}}})
	if !errors.Is(err, topology.ErrInvalidName) {
		t.Fatalf("Validate = %v, want a collision with x's migration queue", err)
	}
	if !strings.Contains(err.Error(), `"p.x.migrating"`) {
		t.Fatalf("Validate error = %q, want it to name the broker queue p.x.migrating", err)
	}
	if got := topology.MigrationName("p.x"); got != "p.x.migrating" {
		t.Fatalf("MigrationName(p.x) = %q", got)
	}
	if args := topology.MigrationArgs(""); len(args) != 0 {
		t.Fatalf("MigrationArgs(\"\") = %v, want none", args)
	}
}

func TestValidateDivertQueueCollision(t *testing.T) {
	t.Parallel()

	err := topology.Validate(topology.Set{Prefix: "p", Queues: []topology.Queue{{Name: "x"}, {Name: "x.migrating.divert"}}})
	if !errors.Is(err, topology.ErrInvalidName) {
		t.Fatalf("Validate = %v, want a collision with x's divert queue", err)
	}
	if !strings.Contains(err.Error(), `"p.x.migrating.divert"`) {
		t.Fatalf("Validate error = %q, want it to name the broker queue p.x.migrating.divert", err)
	}
	if got := topology.DivertName("p.x"); got != "p.x.migrating.divert" {
		t.Fatalf("DivertName(p.x) = %q", got)
	}
	// The longest work queue Validate accepts still has a divert queue
	// whose name fits.
	if n := len(topology.DivertName(strings.Repeat("w", topology.MaxWorkNameBytes))); n > topology.MaxNameBytes {
		t.Fatalf("the divert queue of the longest work queue is %d bytes, over %d", n, topology.MaxNameBytes)
	}
	args := topology.DivertArgs()
	if args["x-max-length"] != int64(0) || args["x-overflow"] != "reject-publish" || len(args) != 2 {
		t.Fatalf("DivertArgs() = %v, want x-max-length 0 (int64) and x-overflow reject-publish", args)
	}
}

// An *ArgumentError carries the refused value, and a *NameError says by a
// sentinel whether it is about the prefix or an empty set, so that a caller
// (the provider) can point at its setting without reading the message.
func TestValidationErrorsCarryFieldAndValue(t *testing.T) {
	t.Parallel()

	var ae *topology.ArgumentError
	if err := topology.ValidateMaxPriority("v256", 300); !errors.As(err, &ae) ||
		ae.Queue != "v256" || ae.Argument != topology.ArgumentMaxPriority || ae.Value != int64(300) ||
		err.Error() != `queue "v256": max priority 300 is out of range: use 1 to 255, or 0 for a queue without priorities` {
		t.Errorf("ValidateMaxPriority(v256, 300) = %#v", err)
	}
	if err := topology.ValidateQueue(topology.Queue{Name: "a", MessageTTL: -time.Millisecond}); !errors.As(err, &ae) ||
		ae.Argument != topology.ArgumentMessageTTL || ae.Value != -time.Millisecond {
		t.Errorf("ValidateQueue with TTL -1ms = %#v", err)
	}
	if err := topology.ValidatePrefix("p."); !errors.Is(err, topology.ErrInvalidPrefix) || errors.Is(err, topology.ErrNoQueues) {
		t.Errorf("ValidatePrefix(p.) = %v, want ErrInvalidPrefix only", err)
	}
	err := topology.Validate(topology.Set{Prefix: "p"})
	if !errors.Is(err, topology.ErrNoQueues) || errors.Is(err, topology.ErrInvalidPrefix) {
		t.Errorf("Validate of a set without queues = %v, want ErrNoQueues only", err)
	}
	if err := topology.ValidateName("p", ""); errors.Is(err, topology.ErrInvalidPrefix) {
		t.Errorf("ValidateName(p, \"\") = %v matches ErrInvalidPrefix", err)
	}
}
