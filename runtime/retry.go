package queuey

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// RetryStrategy says how a retry policy spaces its attempts.
type RetryStrategy int

const (
	// RetryExponential waits min(Max, Base*Factor^(attempt-1)) with full
	// jitter: a uniformly random delay between zero and that bound, so that
	// jobs that failed together do not come back together. It is the zero
	// value, and so the default.
	RetryExponential RetryStrategy = iota
	// RetryFixed waits Base before every retry.
	RetryFixed
	// RetryNone never retries: the first failure dead-letters the job.
	RetryNone
)

func (s RetryStrategy) String() string {
	switch s {
	case RetryExponential:
		return "exponential"
	case RetryFixed:
		return "fixed"
	case RetryNone:
		return "none"
	}
	return fmt.Sprintf("RetryStrategy(%d)", int(s))
}

// Retry policy defaults.
const (
	// DefaultMaxAttempts is how many times a job runs, the first attempt
	// included, unless a policy says otherwise.
	DefaultMaxAttempts = 10
	// DefaultRetryBase is the first retry delay of an exponential policy
	// and the delay of a fixed one.
	DefaultRetryBase = time.Second
	// DefaultRetryFactor multiplies the delay after each attempt of an
	// exponential policy.
	DefaultRetryFactor = 2.0
	// DefaultRetryMax caps the delay of an exponential policy.
	DefaultRetryMax = 5 * time.Minute
)

// RetryPolicy decides whether a job whose handler returned an ordinary error
// runs again, and after how long. A retry travels through a hold queue, so
// its delay is rounded up to the worker's retry granularity.
//
// The zero value is an exponential policy with every default: 10 attempts,
// 1 s base, factor 2, at most 5 min, full jitter.
type RetryPolicy struct {
	// Base is the first delay of an exponential policy and every delay of a
	// fixed one. Defaults to 1 s.
	Base time.Duration
	// Factor multiplies the delay after each attempt of an exponential
	// policy. Defaults to 2.
	Factor float64
	// Max caps the delay of an exponential policy before jitter. Defaults
	// to 5 min.
	Max time.Duration
	// MaxAttempts is how many times the job runs in all, the first attempt
	// included: 3 means one run and at most two retries. Defaults to 10;
	// RetryNone ignores it (a job runs once).
	MaxAttempts int
	// Strategy is exponential, fixed or none. Defaults to exponential.
	Strategy RetryStrategy
}

// NoRetry is a policy that dead-letters a job on its first failure.
func NoRetry() RetryPolicy { return RetryPolicy{Strategy: RetryNone} }

// FixedRetry runs a job at most maxAttempts times, delay apart.
func FixedRetry(maxAttempts int, delay time.Duration) RetryPolicy {
	return RetryPolicy{Strategy: RetryFixed, MaxAttempts: maxAttempts, Base: delay}
}

// ExponentialRetry runs a job at most maxAttempts times with the default
// exponential backoff (1 s doubling to 5 min, full jitter). Set Base, Factor
// and Max on the result to change the curve.
func ExponentialRetry(maxAttempts int) RetryPolicy {
	return RetryPolicy{Strategy: RetryExponential, MaxAttempts: maxAttempts}
}

// withDefaults resolves the zero fields of p.
func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Strategy == RetryNone {
		return RetryPolicy{Strategy: RetryNone, MaxAttempts: 1}
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.Base == 0 {
		p.Base = DefaultRetryBase
	}
	if p.Factor == 0 {
		p.Factor = DefaultRetryFactor
	}
	if p.Max == 0 {
		p.Max = DefaultRetryMax
	}
	return p
}

// Validate refuses a policy that cannot be followed: negative values, a
// factor below 1 (delays would shrink), or a delay longer than a hold queue
// can carry, which would otherwise only surface at the job's first failure.
func (p RetryPolicy) Validate() error {
	if p.Strategy < RetryExponential || p.Strategy > RetryNone {
		return fmt.Errorf("retry policy: unknown strategy %d", int(p.Strategy))
	}
	if p.Strategy == RetryNone {
		return nil
	}
	switch {
	case p.MaxAttempts < 0:
		return fmt.Errorf("retry policy: max attempts %d is negative: use 0 for the default of %d", p.MaxAttempts, DefaultMaxAttempts)
	case p.Base < 0:
		return fmt.Errorf("retry policy: base delay %s is negative", p.Base)
	case p.Max < 0:
		return fmt.Errorf("retry policy: max delay %s is negative", p.Max)
	case p.Factor != 0 && (p.Factor < 1 || math.IsNaN(p.Factor) || math.IsInf(p.Factor, 0)):
		return fmt.Errorf("retry policy: factor %v must be at least 1, or 0 for the default of %v", p.Factor, DefaultRetryFactor)
	}
	r := p.withDefaults()
	longest := r.Max
	if r.Strategy == RetryFixed {
		longest = r.Base
	}
	if longest.Milliseconds() > topology.MaxHoldTTL {
		return fmt.Errorf("retry policy: %w", &topology.DelayTooLongError{Delay: longest})
	}
	return nil
}

// Backoff is the delay bound after a failure of attempt (1-based): the
// delay itself for a fixed policy, the ceiling of the jitter for an
// exponential one.
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	r := p.withDefaults()
	switch r.Strategy {
	case RetryNone:
		return 0
	case RetryFixed:
		return r.Base
	}
	if attempt < 1 {
		attempt = 1
	}
	// Computed in float64 so that no power can overflow; anything beyond
	// Max is Max.
	d := float64(r.Base) * math.Pow(r.Factor, float64(attempt-1))
	if d >= float64(r.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		return r.Max
	}
	return time.Duration(d)
}

// Delay is the delay before the retry that follows a failure of attempt:
// Backoff(attempt) for a fixed policy, a uniformly random duration in
// [0, Backoff(attempt)] for an exponential one ("full jitter"). rnd returns a
// number in [0, 1); nil uses math/rand/v2.
func (p RetryPolicy) Delay(attempt int, rnd func() float64) time.Duration {
	b := p.Backoff(attempt)
	if p.Strategy != RetryExponential || b <= 0 {
		return b
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	f := rnd()
	if f < 0 || f >= 1 || math.IsNaN(f) {
		f = 0
	}
	// b+1 makes the bound itself reachable.
	return time.Duration(f * float64(b+1))
}

// Retries reports whether a job that failed on attempt runs again.
func (p RetryPolicy) Retries(attempt int) bool {
	r := p.withDefaults()
	return r.Strategy != RetryNone && attempt < r.MaxAttempts
}

// Attempts is the resolved number of attempts the policy allows.
func (p RetryPolicy) Attempts() int { return p.withDefaults().MaxAttempts }

// retryPolicySource names one level of the precedence order: resolve
// reports which level won, so that a test can tell a level that won from one
// that happens to set the same policy. The dispatcher uses only the policy.
type retryPolicySource int

const (
	sourceDefault retryPolicySource = iota // the built-in defaults
	sourceWorkerDefault
	sourceQueueDefault
	sourceJobType
	sourceQueueOverride
	sourceKindOverride
	sourceHandler
)

func (s retryPolicySource) String() string {
	return [...]string{"built-in default", "worker default", "queue default", "job type default", "worker override for the queue", "worker override for the job type", "handler"}[s]
}

// retryCandidates holds every level that may set a policy for one job;
// a nil pointer is a level that does not.
type retryCandidates struct {
	handler       *RetryPolicy
	kindOverride  *RetryPolicy
	queueOverride *RetryPolicy
	jobType       *RetryPolicy
	queueDefault  *RetryPolicy // QueueConfig.Retry
	workerDefault *RetryPolicy // WorkerOptions.Retry
}

// resolve applies the precedence, highest first: handler > worker override
// per job type > worker override per queue > job type default > queue
// default > worker default for every queue > built-in default.
func (c retryCandidates) resolve() (RetryPolicy, retryPolicySource) {
	switch {
	case c.handler != nil:
		return *c.handler, sourceHandler
	case c.kindOverride != nil:
		return *c.kindOverride, sourceKindOverride
	case c.queueOverride != nil:
		return *c.queueOverride, sourceQueueOverride
	case c.jobType != nil:
		return *c.jobType, sourceJobType
	case c.queueDefault != nil:
		return *c.queueDefault, sourceQueueDefault
	case c.workerDefault != nil:
		return *c.workerDefault, sourceWorkerDefault
	}
	return RetryPolicy{}, sourceDefault
}
