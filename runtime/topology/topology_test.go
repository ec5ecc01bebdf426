package topology_test

import (
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

func TestNames(t *testing.T) {
	t.Parallel()

	tests := []struct {
		prefix, name string
		ttlMs        int64
		work         string
		dead         string
		hold         string
	}{
		{"myapp", "emails", 30000, "myapp.emails", "myapp.emails.dead", "myapp.emails.deferred.30000"},
		{"aq-example", "emails", 500, "aq-example.emails", "aq-example.emails.dead", "aq-example.emails.deferred.500"},
		{"p", "a.b", 1, "p.a.b", "p.a.b.dead", "p.a.b.deferred.1"},
		{"p", "x", topology.MaxHoldTTL, "p.x", "p.x.dead", "p.x.deferred.2147483647"},
		{"ünï", "cödé", 1000, "ünï.cödé", "ünï.cödé.dead", "ünï.cödé.deferred.1000"},
	}
	for _, tt := range tests {
		t.Run(tt.work, func(t *testing.T) {
			t.Parallel()
			work := topology.WorkName(tt.prefix, tt.name)
			if work != tt.work {
				t.Fatalf("WorkName(%q, %q) = %q, want %q", tt.prefix, tt.name, work, tt.work)
			}
			if got := topology.DeadName(work); got != tt.dead {
				t.Fatalf("DeadName(%q) = %q, want %q", work, got, tt.dead)
			}
			if got := topology.HoldName(work, tt.ttlMs); got != tt.hold {
				t.Fatalf("HoldName(%q, %d) = %q, want %q", work, tt.ttlMs, got, tt.hold)
			}
		})
	}
}

func TestConstants(t *testing.T) {
	t.Parallel()

	// The argument and header names travel to the broker and to other
	// implementations of queuey: they must not drift.
	strs := []struct{ got, want string }{
		{topology.ArgMaxPriority, "x-max-priority"},
		{topology.ArgMessageTTL, "x-message-ttl"},
		{topology.ArgExpires, "x-expires"},
		{topology.ArgDeadLetterExchange, "x-dead-letter-exchange"},
		{topology.ArgDeadLetterRoutingKey, "x-dead-letter-routing-key"},
		{topology.HeaderDeferrals, "x-deferrals"},
		{topology.HeaderAttempt, "x-attempt"},
		{topology.HeaderDeathReason, "x-death-reason"},
		{topology.HeaderOriginalQueue, "x-original-queue"},
		{topology.HeaderAttempts, "x-attempts"},
		{topology.DeadSuffix, ".dead"},
		{topology.HoldInfix, ".deferred."},
	}
	for _, tt := range strs {
		if tt.got != tt.want {
			t.Fatalf("constant = %q, want %q", tt.got, tt.want)
		}
	}

	ints := []struct {
		name      string
		got, want int64
	}{
		{"MaxNameBytes", int64(topology.MaxNameBytes), 255},
		{"MaxWorkNameBytes", int64(topology.MaxWorkNameBytes), 235},
		{"MaxHoldTTL", topology.MaxHoldTTL, 1<<31 - 1},
		{"MaxMessageTTL", topology.MaxMessageTTL, 1<<32 - 1},
		{"2*MaxHoldTTL fits x-expires", 2 * topology.MaxHoldTTL, 1<<32 - 2},
		{"DefaultMaxPriority", int64(topology.DefaultMaxPriority), 10},
		{"MaxPriorityLimit", int64(topology.MaxPriorityLimit), 255},
		{"DefaultGranularity", int64(topology.DefaultGranularity), int64(time.Second)},
	}
	for _, tt := range ints {
		if tt.got != tt.want {
			t.Fatalf("%s = %d, want %d", tt.name, tt.got, tt.want)
		}
	}
	if !topology.DeadDurable {
		t.Fatalf("DeadDurable = false, want true: dead letters must survive a broker restart")
	}
	// MaxHoldTTL must fit the ten digits MaxWorkNameBytes leaves room for.
	if n := len(strconv.FormatInt(topology.MaxHoldTTL, 10)); n != 10 {
		t.Fatalf("MaxHoldTTL has %d digits, want 10", n)
	}
}

// checkArgs compares args with want, insisting that every integer is an int64:
// RabbitMQ treats a string "10" as a different argument from 10, and amqp091-go
// would send a Go int with a width of its own choosing.
func checkArgs(t *testing.T, args, want map[string]any) {
	t.Helper()
	if args == nil {
		t.Fatalf("args are nil, want a non-nil map")
	}
	if len(args) != len(want) {
		t.Fatalf("args = %#v, want exactly %#v", args, want)
	}
	for k, w := range want {
		got, ok := args[k]
		if !ok {
			t.Fatalf("args = %#v: missing %q", args, k)
		}
		switch w := w.(type) {
		case int64:
			g, ok := got.(int64)
			if !ok {
				t.Fatalf("args[%q] = %#v (%T), want int64 %d", k, got, got, w)
			}
			if g != w {
				t.Fatalf("args[%q] = %d, want %d", k, g, w)
			}
		case string:
			g, ok := got.(string)
			if !ok {
				t.Fatalf("args[%q] = %#v (%T), want string %q", k, got, got, w)
			}
			if g != w {
				t.Fatalf("args[%q] = %q, want %q", k, g, w)
			}
		default:
			t.Fatalf("test bug: unexpected want type %T", w)
		}
	}
}

func TestWorkArgs(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		q    topology.Queue
		want map[string]any
	}{
		{"default priority", topology.Queue{Name: "a", MaxPriority: topology.DefaultMaxPriority, Durable: true},
			map[string]any{"x-max-priority": int64(10)}},
		{"priority 0 means none", topology.Queue{Name: "a", MaxPriority: 0, Durable: true},
			map[string]any{}},
		{"priority 1", topology.Queue{Name: "a", MaxPriority: 1},
			map[string]any{"x-max-priority": int64(1)}},
		{"priority 255", topology.Queue{Name: "a", MaxPriority: 255},
			map[string]any{"x-max-priority": int64(255)}},
		{"ttl only", topology.Queue{Name: "a", MessageTTL: 90 * time.Second},
			map[string]any{"x-message-ttl": int64(90000)}},
		{"ttl 1ms", topology.Queue{Name: "a", MessageTTL: time.Millisecond},
			map[string]any{"x-message-ttl": int64(1)}},
		{"ttl at RabbitMQ's limit", topology.Queue{Name: "a", MessageTTL: time.Duration(topology.MaxMessageTTL) * time.Millisecond},
			map[string]any{"x-message-ttl": int64(4294967295)}},
		{"both", topology.Queue{Name: "a", MaxPriority: 10, MessageTTL: 24 * time.Hour},
			map[string]any{"x-max-priority": int64(10), "x-message-ttl": int64(86400000)}},
		{"neither", topology.Queue{Name: "a"},
			map[string]any{}},
		{"durability does not change arguments", topology.Queue{Name: "a", MaxPriority: 3, Durable: false},
			map[string]any{"x-max-priority": int64(3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkArgs(t, topology.WorkArgs(tt.q), tt.want)
		})
	}
}

func TestWorkArgsFreshMap(t *testing.T) {
	t.Parallel()

	// Callers hand the map to amqp091-go or merge into it; two calls must not
	// share one map.
	q := topology.Queue{Name: "a", MaxPriority: 10}
	a := topology.WorkArgs(q)
	a["x-extra"] = "mutated"
	checkArgs(t, topology.WorkArgs(q), map[string]any{"x-max-priority": int64(10)})

	d := topology.DeadArgs("")
	d["x-extra"] = "mutated"
	checkArgs(t, topology.DeadArgs(""), map[string]any{})
}

func TestDeadArgs(t *testing.T) {
	t.Parallel()

	checkArgs(t, topology.DeadArgs(""), map[string]any{})
}

func TestHoldArgs(t *testing.T) {
	t.Parallel()

	tests := []struct {
		work  string
		ttlMs int64
	}{
		{"myapp.emails", 30000},
		{"aq-example.emails", 500},
		{"p.x", 1},
		{"p.x", 1000},
		{"p.x", topology.MaxHoldTTL},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.work, tt.ttlMs), func(t *testing.T) {
			t.Parallel()
			args := topology.HoldArgs(tt.work, tt.ttlMs)
			checkArgs(t, args, map[string]any{
				"x-message-ttl":             tt.ttlMs,
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": tt.work,
				"x-expires":                 2 * tt.ttlMs,
			})
			if _, ok := args["x-max-priority"]; ok {
				t.Fatalf("hold queue args %#v carry a priority argument", args)
			}
			// x-expires must stay within RabbitMQ's 2^32-1 ms for every TTL
			// HoldTTL can return.
			if exp := args["x-expires"].(int64); exp > 1<<32-1 {
				t.Fatalf("x-expires = %d is above 2^32-1", exp)
			}
		})
	}
}

func TestParseHoldNameRoundTrip(t *testing.T) {
	t.Parallel()

	tests := []struct {
		work  string
		ttlMs int64
	}{
		{"myapp.emails", 30000},
		{"p.x", 1},
		{"p.x", 9},
		{"p.x", 10},
		{"p.x", 1000000000},
		{"p.x", topology.MaxHoldTTL},
		// A work queue whose own name contains the infix: the TTL is the
		// part after the last one.
		{"p.a.deferred.5", 7},
		{"p.a.deferred.", 7},
		{"p", 500},
		{"ünï.cödé", 1000},
		{strings.Repeat("w", topology.MaxWorkNameBytes), topology.MaxHoldTTL},
	}
	for _, tt := range tests {
		name := topology.HoldName(tt.work, tt.ttlMs)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			work, ttl, ok := topology.ParseHoldName(name)
			if !ok {
				t.Fatalf("ParseHoldName(%q) = not a hold name, want (%q, %d)", name, tt.work, tt.ttlMs)
			}
			if work != tt.work || ttl != tt.ttlMs {
				t.Fatalf("ParseHoldName(%q) = (%q, %d), want (%q, %d)", name, work, ttl, tt.work, tt.ttlMs)
			}
		})
	}
}

func TestParseHoldNameRejects(t *testing.T) {
	t.Parallel()

	tests := []struct {
		why  string
		name string
	}{
		{"empty", ""},
		{"work queue", "p.x"},
		{"dead queue", "p.x.dead"},
		{"bare dead suffix", "x.dead"},
		{"no infix", "p.x.500"},
		{"other infix", "p.x.delayed.500"},
		{"infix without dot", "p.xdeferred.500"},
		{"infix only", ".deferred."},
		{"empty work", ".deferred.500"},
		{"empty digits", "p.x.deferred."},
		{"leading zero", "p.x.deferred.0500"},
		{"zero", "p.x.deferred.0"},
		{"double zero", "p.x.deferred.00"},
		{"11 digits", "p.x.deferred.10000000000"},
		{"11 digits leading 1", "p.x.deferred.12345678901"},
		{"above MaxHoldTTL", "p.x.deferred.2147483648"},
		{"10 nines", "p.x.deferred.9999999999"},
		{"negative", "p.x.deferred.-5"},
		{"plus sign", "p.x.deferred.+5"},
		{"space", "p.x.deferred. 5"},
		{"trailing space", "p.x.deferred.5 "},
		{"hex", "p.x.deferred.0x10"},
		{"underscore", "p.x.deferred.1_000"},
		{"fraction", "p.x.deferred.1.5"},
		{"non-ASCII digit", "p.x.deferred.٥"},
		{"suffix after digits", "p.x.deferred.500.dead"},
		{"later infix without digits", "p.x.deferred.500.deferred."},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			t.Parallel()
			if work, ttl, ok := topology.ParseHoldName(tt.name); ok {
				t.Fatalf("ParseHoldName(%q) = (%q, %d, true), want false", tt.name, work, ttl)
			} else if work != "" || ttl != 0 {
				t.Fatalf("ParseHoldName(%q) = (%q, %d, false), want zero values with false", tt.name, work, ttl)
			}
		})
	}
}

func TestWithoutDefaults(t *testing.T) {
	for _, c := range []struct {
		name     string
		in, want map[string]any
	}{
		{"RabbitMQ 4's classic is dropped",
			map[string]any{topology.ArgQueueType: "classic", topology.ArgMaxPriority: int64(10)},
			map[string]any{topology.ArgMaxPriority: int64(10)}},
		{"nothing else to drop",
			map[string]any{topology.ArgQueueType: "classic"}, map[string]any{}},
		{"another type stays a difference",
			map[string]any{topology.ArgQueueType: "quorum", topology.ArgMaxPriority: int64(10)},
			map[string]any{topology.ArgQueueType: "quorum", topology.ArgMaxPriority: int64(10)}},
		{"RabbitMQ 3's arguments are left as they are",
			map[string]any{topology.ArgMaxPriority: int64(10)}, map[string]any{topology.ArgMaxPriority: int64(10)}},
		{"no arguments", nil, nil},
	} {
		in := maps.Clone(c.in)
		if got := topology.WithoutDefaults(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: topology.WithoutDefaults(%v) = %v, want %v", c.name, c.in, got, c.want)
		}
		if !reflect.DeepEqual(in, c.in) {
			t.Errorf("%s: WithoutDefaults changed its argument to %v", c.name, c.in)
		}
	}
}
