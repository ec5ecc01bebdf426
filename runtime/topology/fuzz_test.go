package topology_test

import (
	"errors"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// fuzzSet builds a set from fuzz input: names is split on ',' into logical
// queues, and the first queue gets the priority and TTL.
func fuzzSet(prefix, names string, priority int, ttl int64) topology.Set {
	s := topology.Set{Prefix: prefix}
	if names == "" {
		return s
	}
	for _, n := range strings.Split(names, ",") {
		s.Queues = append(s.Queues, topology.Queue{Name: n, MaxPriority: topology.DefaultMaxPriority, Durable: true})
	}
	s.Queues[0].MaxPriority = priority
	s.Queues[0].MessageTTL = time.Duration(ttl)
	return s
}

// isHoldOf reports whether a is a name HoldName(b, ttl) gives for some TTL
// HoldTTL can return, without using ParseHoldName.
func isHoldOf(a, b string) bool {
	digits, ok := strings.CutPrefix(a, b+".deferred.")
	if !ok || len(digits) == 0 || len(digits) > 10 || digits[0] == '0' {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64) // 10 digits always fit
	return err == nil && n >= 1 && n <= 1<<31-1
}

// setProblems lists what is wrong with s, worked out independently of
// Validate, from SPEC §1 and RabbitMQ's limits.
func setProblems(s topology.Set) []string {
	var p []string
	if s.Prefix == "" || strings.HasSuffix(s.Prefix, ".") || strings.HasPrefix(s.Prefix+".", "amq.") {
		p = append(p, "prefix")
	}
	if len(s.Queues) == 0 {
		p = append(p, "no queues")
	}
	seen := map[string]bool{}
	var works []string
	for _, q := range s.Queues {
		work := s.Prefix + "." + q.Name
		works = append(works, work)
		if q.Name == "" {
			p = append(p, "empty name")
		}
		if len(work+".deferred.2147483647") > 255 {
			p = append(p, "too long")
		}
		if q.MaxPriority < 0 || q.MaxPriority > 255 {
			p = append(p, "priority")
		}
		if q.MessageTTL < 0 || q.MessageTTL%time.Millisecond != 0 || q.MessageTTL/time.Millisecond > 1<<32-1 {
			p = append(p, "ttl")
		}
		for _, n := range []string{work, work + ".dead", work + ".migrating", work + ".migrating.divert"} {
			if seen[n] {
				p = append(p, "collision "+n)
			}
			seen[n] = true
		}
	}
	for _, a := range works {
		for _, b := range works {
			if isHoldOf(a, b) {
				p = append(p, "hold "+a)
			}
		}
	}
	return p
}

func FuzzValidate(f *testing.F) {
	f.Add("myapp", "emails", 10, int64(0))
	f.Add("myapp", "emails,reports,billing", 10, int64(60*time.Second))
	f.Add("p", "x,x.dead", 10, int64(0))
	f.Add("p", "x,x.migrating", 10, int64(0))
	f.Add("p", "x,x.migrating.divert", 10, int64(0))
	f.Add("p", "x.dead,x", 10, int64(0))
	f.Add("p", "x,x.deferred.500", 10, int64(0))
	f.Add("p", "x,x.dead.deferred.500", 10, int64(0))
	f.Add("p", "x,x.deferred.0500", 10, int64(0))
	f.Add("p", "x,x.deferred.2147483648", 10, int64(0))
	f.Add("p", "a,b,a", 10, int64(0))
	f.Add("p", "a,,b", 10, int64(0))
	f.Add("", "a", 10, int64(0))
	f.Add("p.", "a", 10, int64(0))
	f.Add("amq", "a", 10, int64(0))
	f.Add("amq.x", "a", 10, int64(0))
	f.Add("amqp", "a", 10, int64(0))
	f.Add("p", "", 10, int64(0))
	f.Add("p", strings.Repeat("n", 233), 10, int64(0))
	f.Add("p", strings.Repeat("n", 234), 10, int64(0))
	f.Add("p", strings.Repeat("é", 117), 0, int64(0))
	f.Add("p", "a", -1, int64(0))
	f.Add("p", "a", 256, int64(0))
	f.Add("p", "a", 255, int64(4294967295*time.Millisecond))
	f.Add("p", "a", 0, int64(4294967296*time.Millisecond))
	f.Add("p", "a", 0, int64(1500*time.Microsecond))
	f.Add("p", "a", 0, int64(-1))
	f.Add("p", "a", 0, int64(math.MinInt64))
	f.Add("p", "a", math.MinInt, int64(math.MaxInt64))
	f.Add("\xff\xfe", "\x00,\xc3", 1, int64(0))

	f.Fuzz(func(t *testing.T, prefix, names string, priority int, ttl int64) {
		s := fuzzSet(prefix, names, priority, ttl)
		err := topology.Validate(s)
		problems := setProblems(s)

		if err != nil {
			if len(problems) == 0 {
				t.Fatalf("Validate(%+v) = %v, but the set has no problem", s, err)
			}
			for _, e := range joined(err) {
				var ne *topology.NameError
				var ae *topology.ArgumentError
				switch {
				case errors.As(e, &ne):
					if !errors.Is(e, topology.ErrInvalidName) {
						t.Fatalf("NameError %v does not match ErrInvalidName", e)
					}
				case errors.As(e, &ae):
					if !errors.Is(e, topology.ErrInvalidArgument) {
						t.Fatalf("ArgumentError %v does not match ErrInvalidArgument", e)
					}
				default:
					t.Fatalf("Validate reported %T %v, want *NameError or *ArgumentError", e, e)
				}
				if e.Error() == "" {
					t.Fatalf("Validate reported an error with an empty message")
				}
			}
			return
		}

		if len(problems) != 0 {
			t.Fatalf("Validate(%+v) = nil, but: %v", s, problems)
		}
		// The properties the rest of queuey relies on, checked directly.
		if s.Prefix == "" || strings.HasSuffix(s.Prefix, ".") {
			t.Fatalf("Validate accepted prefix %q", s.Prefix)
		}
		if len(s.Queues) == 0 {
			t.Fatalf("Validate accepted a set with no queues")
		}
		works := map[string]bool{}
		for _, q := range s.Queues {
			works[topology.WorkName(s.Prefix, q.Name)] = true
		}
		names2 := map[string]bool{}
		for _, q := range s.Queues {
			work := topology.WorkName(s.Prefix, q.Name)
			if len(work) > topology.MaxWorkNameBytes {
				t.Fatalf("accepted work queue of %d bytes", len(work))
			}
			if n := len(topology.DivertName(work)); n > topology.MaxNameBytes {
				t.Fatalf("accepted work queue %q whose divert queue name is %d bytes", work, n)
			}
			if n := len(topology.HoldName(work, topology.MaxHoldTTL)); n > topology.MaxNameBytes {
				t.Fatalf("accepted work queue %q whose longest hold name is %d bytes", work, n)
			}
			if strings.HasPrefix(work, "amq.") {
				t.Fatalf("accepted work queue %q in RabbitMQ's reserved namespace", work)
			}
			for _, n := range []string{work, topology.DeadName(work), topology.MigrationName(work), topology.DivertName(work)} {
				if names2[n] {
					t.Fatalf("accepted a set where two queues are named %q", n)
				}
				names2[n] = true
			}
			if held, _, ok := topology.ParseHoldName(work); ok && works[held] {
				t.Fatalf("accepted work queue %q, a hold queue of %q", work, held)
			}
			for k, v := range topology.WorkArgs(q) {
				if _, ok := v.(int64); !ok {
					t.Fatalf("WorkArgs[%q] = %#v (%T), want int64", k, v, v)
				}
			}
		}
	})
}

func FuzzHoldTTL(f *testing.F) {
	ms := int64(time.Millisecond)
	f.Add(int64(0), int64(time.Second))
	f.Add(int64(1), int64(time.Second))
	f.Add(int64(time.Second), int64(time.Second))
	f.Add(int64(29200*time.Millisecond), int64(time.Second))
	f.Add(int64(1501*time.Millisecond), int64(500*time.Millisecond))
	f.Add(int64(time.Second), int64(10*time.Second))
	f.Add(topology.MaxHoldTTL*ms, ms)
	f.Add((topology.MaxHoldTTL+1)*ms, ms)
	f.Add(topology.MaxHoldTTL*ms+1, ms)
	f.Add(2147483000*ms, int64(time.Second))
	f.Add(2147483001*ms, int64(time.Second))
	f.Add(int64(30*24*time.Hour), int64(time.Second))
	f.Add(int64(0), (topology.MaxHoldTTL+1)*ms)
	f.Add(int64(math.MaxInt64), ms)
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64)/ms*ms)
	f.Add(int64(-1), int64(time.Second))
	f.Add(int64(math.MinInt64), int64(time.Second))
	f.Add(int64(time.Second), int64(0))
	f.Add(int64(time.Second), int64(-1))
	f.Add(int64(time.Second), int64(math.MinInt64))
	f.Add(int64(time.Second), int64(time.Microsecond))
	f.Add(int64(time.Second), ms+1)

	f.Fuzz(func(t *testing.T, delayNs, granNs int64) {
		delay, gran := time.Duration(delayNs), time.Duration(granNs)
		got, err := topology.HoldTTL(delay, gran)

		// A step longer than the ceiling fits no delay, so it is the
		// granularity that is invalid, not the delay that is too long.
		invalid := delayNs < 0 || granNs <= 0 || granNs%ms != 0 || granNs/ms > topology.MaxHoldTTL
		if invalid {
			if err == nil || !errors.Is(err, topology.ErrInvalidDelay) || errors.Is(err, topology.ErrDelayTooLong) || got != 0 {
				t.Fatalf("HoldTTL(%d, %d) = (%d, %v), want ErrInvalidDelay", delayNs, granNs, got, err)
			}
			return
		}

		// want = max(1, ceil(delay/gran)) * gran/1ms, in arbitrary precision.
		d, g := big.NewInt(delayNs), big.NewInt(granNs)
		steps, rem := new(big.Int).QuoRem(d, g, new(big.Int))
		if rem.Sign() != 0 || steps.Sign() == 0 {
			steps.Add(steps, big.NewInt(1))
		}
		want := new(big.Int).Mul(steps, big.NewInt(granNs/ms))
		if want.Cmp(big.NewInt(topology.MaxHoldTTL)) > 0 {
			var tooLong *topology.DelayTooLongError
			if err == nil || !errors.Is(err, topology.ErrDelayTooLong) || errors.Is(err, topology.ErrInvalidDelay) ||
				!errors.As(err, &tooLong) || tooLong.Delay != delay || got != 0 {
				t.Fatalf("HoldTTL(%d, %d) = (%d, %v), want DelayTooLongError: rounded is %s ms", delayNs, granNs, got, err, want)
			}
			return
		}
		if err != nil {
			t.Fatalf("HoldTTL(%d, %d) error = %v, want %s", delayNs, granNs, err, want)
		}
		if got != want.Int64() {
			t.Fatalf("HoldTTL(%d, %d) = %d, want %s", delayNs, granNs, got, want)
		}

		// The properties callers rely on, stated directly.
		granMs := granNs / ms
		if got <= 0 || got%granMs != 0 || got > topology.MaxHoldTTL {
			t.Fatalf("HoldTTL(%d, %d) = %d: not a positive multiple of %d ms within the ceiling", delayNs, granNs, got, granMs)
		}
		gotNs := new(big.Int).Mul(big.NewInt(got), big.NewInt(ms))
		if gotNs.Cmp(d) < 0 {
			t.Fatalf("HoldTTL(%d, %d) = %d ms: shorter than the delay", delayNs, granNs, got)
		}
		if delayNs == 0 {
			if got != granMs {
				t.Fatalf("HoldTTL(0, %d) = %d, want one step", granNs, got)
			}
		} else if gotNs.Cmp(new(big.Int).Add(d, g)) >= 0 {
			t.Fatalf("HoldTTL(%d, %d) = %d ms: a whole step longer than needed", delayNs, granNs, got)
		}
		// What goes on the wire fits RabbitMQ's x-expires.
		if exp := topology.HoldArgs("q", got)[topology.ArgExpires].(int64); exp > 1<<32-1 {
			t.Fatalf("x-expires %d above 2^32-1", exp)
		}
	})
}

func FuzzParseHoldName(f *testing.F) {
	f.Add("myapp.emails.deferred.30000", int64(30000))
	f.Add("p.x.deferred.1", int64(1))
	f.Add("p.x.deferred.2147483647", topology.MaxHoldTTL)
	f.Add("p.x.deferred.2147483648", topology.MaxHoldTTL+1)
	f.Add("p.x.deferred.9999999999", int64(9999999999))
	f.Add("p.x.deferred.10000000000", int64(10000000000))
	f.Add("p.x.deferred.0500", int64(500))
	f.Add("p.x.deferred.0", int64(0))
	f.Add("p.x.deferred.", int64(-1))
	f.Add(".deferred.5", int64(5))
	f.Add("x.dead", int64(1))
	f.Add("p.x", int64(1))
	f.Add("p.a.deferred.5.deferred.7", int64(7))
	f.Add("p.x.deferred.+5", int64(5))
	f.Add("p.x.deferred.٥", int64(5))
	f.Add("", int64(0))

	f.Fuzz(func(t *testing.T, name string, ttl int64) {
		work, got, ok := topology.ParseHoldName(name)
		if ok {
			if back := topology.HoldName(work, got); back != name {
				t.Fatalf("ParseHoldName(%q) = (%q, %d), but HoldName gives %q", name, work, got, back)
			}
			if work == "" || got < 1 || got > topology.MaxHoldTTL {
				t.Fatalf("ParseHoldName(%q) = (%q, %d, true): out of range", name, work, got)
			}
		} else if work != "" || got != 0 {
			t.Fatalf("ParseHoldName(%q) = (%q, %d, false), want zero values", name, work, got)
		}

		// The other way round: every name HoldName gives for a TTL HoldTTL
		// can return parses back, whatever the work queue's name.
		if name != "" && ttl >= 1 && ttl <= topology.MaxHoldTTL {
			hold := topology.HoldName(name, ttl)
			w, n, ok := topology.ParseHoldName(hold)
			if !ok || w != name || n != ttl {
				t.Fatalf("ParseHoldName(HoldName(%q, %d)) = (%q, %d, %v)", name, ttl, w, n, ok)
			}
		}
	})
}
