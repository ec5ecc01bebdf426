package queuey

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

func TestRetryPolicyBackoffExponential(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{} // every default: 1 s, ×2, 5 min
	want := []time.Duration{
		1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second,
		8: 128 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 11: 5 * time.Minute,
	}
	for attempt, d := range want {
		if d == 0 {
			continue
		}
		if got := p.Backoff(attempt); got != d {
			t.Errorf("Backoff(%d) = %s, want %s", attempt, got, d)
		}
	}
	// Enormous attempts neither overflow nor go negative.
	for _, attempt := range []int{64, 1000, 1 << 30} {
		if got := p.Backoff(attempt); got != 5*time.Minute {
			t.Errorf("Backoff(%d) = %s, want the 5 min cap", attempt, got)
		}
	}
	custom := RetryPolicy{Base: 100 * time.Millisecond, Factor: 3, Max: 2 * time.Second}
	for attempt, d := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 300 * time.Millisecond, 3: 900 * time.Millisecond, 4: 2 * time.Second} {
		if got := custom.Backoff(attempt); got != d {
			t.Errorf("custom Backoff(%d) = %s, want %s", attempt, got, d)
		}
	}
}

func TestRetryPolicyFullJitterBounds(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{Base: time.Second, Max: 10 * time.Second}
	if got := p.Delay(3, func() float64 { return 0 }); got != 0 {
		t.Errorf("Delay with rnd 0 = %s, want 0", got)
	}
	if got := p.Delay(3, func() float64 { return 0.9999999999 }); got < 4*time.Second-time.Microsecond || got > 4*time.Second {
		t.Errorf("Delay with rnd→1 = %s, want just below or at 4s", got)
	}
	if got := p.Delay(3, func() float64 { return 0.5 }); got < 2*time.Second-time.Millisecond || got > 2*time.Second+time.Millisecond {
		t.Errorf("Delay with rnd 0.5 = %s, want about 2s", got)
	}
	// A broken rnd never yields a delay outside the bound.
	if got := p.Delay(3, func() float64 { return 7 }); got < 0 || got > 4*time.Second {
		t.Errorf("Delay with rnd 7 = %s, want within [0, 4s]", got)
	}
	// With the real generator: every delay in [0, bound], and spread out.
	r := rand.New(rand.NewPCG(1, 2))
	for attempt := 1; attempt <= 8; attempt++ {
		bound := p.Backoff(attempt)
		var lo, hi time.Duration = bound, 0
		for range 2000 {
			d := p.Delay(attempt, r.Float64)
			if d < 0 || d > bound {
				t.Fatalf("attempt %d: delay %s outside [0, %s]", attempt, d, bound)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo > bound/10 || hi < bound*9/10 {
			t.Errorf("attempt %d: delays spread over [%s, %s] only, want most of [0, %s]", attempt, lo, hi, bound)
		}
	}
	// Fixed policies do not jitter.
	f := FixedRetry(3, 1500*time.Millisecond)
	for range 100 {
		if got := f.Delay(2, nil); got != 1500*time.Millisecond {
			t.Fatalf("fixed Delay = %s, want 1.5s", got)
		}
	}
}

func TestRetryPolicyMaxAttemptsCountsTheFirst(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		p       RetryPolicy
		retries []bool // Retries(1), Retries(2), ...
	}{
		{"three attempts", ExponentialRetry(3), []bool{true, true, false, false}},
		{"fixed two", FixedRetry(2, time.Second), []bool{true, false}},
		{"one attempt", RetryPolicy{MaxAttempts: 1}, []bool{false}},
		{"none ignores max attempts", RetryPolicy{Strategy: RetryNone, MaxAttempts: 5}, []bool{false, false}},
		{"NoRetry", NoRetry(), []bool{false}},
		{"default is ten", RetryPolicy{}, []bool{true, true, true, true, true, true, true, true, true, false}},
	}
	for _, c := range cases {
		for i, want := range c.retries {
			if got := c.p.Retries(i + 1); got != want {
				t.Errorf("%s: Retries(%d) = %v, want %v", c.name, i+1, got, want)
			}
		}
	}
	if got := NoRetry().Attempts(); got != 1 {
		t.Errorf("NoRetry().Attempts() = %d, want 1", got)
	}
}

func TestRetryPolicyValidate(t *testing.T) {
	t.Parallel()
	good := []RetryPolicy{{}, NoRetry(), FixedRetry(3, time.Second), {Factor: 1}, {Max: 24 * 24 * time.Hour}}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: unexpected error %v", p, err)
		}
	}
	bad := []RetryPolicy{
		{MaxAttempts: -1}, {Base: -time.Second}, {Max: -1}, {Factor: 0.5}, {Strategy: 9},
		{Max: 30 * 24 * time.Hour}, FixedRetry(3, 25*24*time.Hour),
	}
	for _, p := range bad {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
	err := RetryPolicy{Max: 30 * 24 * time.Hour}.Validate()
	if !errors.Is(err, topology.ErrDelayTooLong) {
		t.Errorf("a cap beyond a hold queue's reach: %v, want ErrDelayTooLong", err)
	}
}

func TestRetryPrecedence(t *testing.T) {
	t.Parallel()
	pol := func(n int) *RetryPolicy { return &RetryPolicy{MaxAttempts: n} }
	cases := []struct {
		c    retryCandidates
		want int
		src  retryPolicySource
	}{
		{retryCandidates{handler: pol(1), kindOverride: pol(2), queueOverride: pol(3), jobType: pol(4), queueDefault: pol(5), workerDefault: pol(6)}, 1, sourceHandler},
		{retryCandidates{kindOverride: pol(2), queueOverride: pol(3), jobType: pol(4), queueDefault: pol(5), workerDefault: pol(6)}, 2, sourceKindOverride},
		{retryCandidates{queueOverride: pol(3), jobType: pol(4), queueDefault: pol(5), workerDefault: pol(6)}, 3, sourceQueueOverride},
		{retryCandidates{jobType: pol(4), queueDefault: pol(5), workerDefault: pol(6)}, 4, sourceJobType},
		{retryCandidates{queueDefault: pol(5), workerDefault: pol(6)}, 5, sourceQueueDefault},
		{retryCandidates{workerDefault: pol(6)}, 6, sourceWorkerDefault},
		{retryCandidates{}, DefaultMaxAttempts, sourceDefault},
		{retryCandidates{handler: pol(1), queueDefault: pol(5)}, 1, sourceHandler},
		{retryCandidates{queueOverride: pol(3), handler: nil, jobType: pol(4)}, 3, sourceQueueOverride},
	}
	for i, c := range cases {
		p, src := c.c.resolve()
		if p.Attempts() != c.want || src != c.src {
			t.Errorf("case %d: got %d attempts from %s, want %d from %s", i, p.Attempts(), src, c.want, c.src)
		}
	}
}
