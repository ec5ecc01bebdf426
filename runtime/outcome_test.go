package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/runtime/internal/jobutil"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	jc := JobContext{ID: "j", Type: "k", Attempt: 2, MaxAttempts: 3}
	policy := RetryPolicy{MaxAttempts: 3, Base: time.Second}
	half := func() float64 { return 0.5 }
	boom := errors.New("boom")

	o := classify(jc, nil, policy, time.Second, time.Second, half)
	if o.Action != ActionAck || o.Err != nil {
		t.Errorf("nil: %+v", o)
	}

	o = classify(jc, boom, policy, time.Second, time.Second, half)
	if o.Action != ActionRetry || o.Delay != time.Second || o.HoldTTL != time.Second {
		// attempt 2: bound 2 s, half of it 1 s, rounded to 1 s
		t.Errorf("retryable on attempt 2 of 3: %+v", o)
	}

	o = classify(jc, boom, policy, 300*time.Millisecond, time.Second, func() float64 { return 0.55 })
	if o.Action != ActionRetry || o.HoldTTL != 1200*time.Millisecond {
		t.Errorf("rounded up to 300ms steps: got %s, want 1.2s (delay %s)", o.HoldTTL, o.Delay)
	}

	o = classify(jc, boom, policy, time.Second, time.Second, func() float64 { return 0 })
	if o.Action != ActionRetry || o.HoldTTL != time.Second {
		t.Errorf("a zero delay still waits one step: %+v", o)
	}

	last := jc
	last.Attempt = 3
	o = classify(last, boom, policy, time.Second, time.Second, half)
	if o.Action != ActionDeadLetter || !strings.Contains(o.Reason, "max attempts (3) exhausted after attempt 3: boom") {
		t.Errorf("last attempt: %+v", o)
	}

	o = classify(jc, fmt.Errorf("sending: %w", JobFatal(boom)), policy, time.Second, time.Second, half)
	if o.Action != ActionDeadLetter || o.Reason != "fatal error: sending: fatal: boom" || !errors.Is(o.Err, ErrJobFatal) || !errors.Is(o.Err, boom) {
		t.Errorf("wrapped fatal: %+v", o)
	}

	o = classify(last, fmt.Errorf("rate limited: %w", JobDefer(2500*time.Millisecond, "Retry-After")), policy, time.Second, time.Second, half)
	if o.Action != ActionDefer || o.Delay != 2500*time.Millisecond || o.HoldTTL != 3*time.Second || o.Reason != "Retry-After" {
		t.Errorf("defer on the last attempt is still a deferral: %+v", o)
	}

	o = classify(jc, JobDefer(30*24*time.Hour, "much later"), policy, time.Second, time.Second, half)
	if o.Action != ActionDeadLetter || !strings.Contains(o.Reason, "deferral refused") {
		t.Errorf("a deferral no hold queue can carry: %+v", o)
	}

	o = classify(jc, boom, NoRetry(), time.Second, time.Second, half)
	if o.Action != ActionDeadLetter {
		t.Errorf("NoRetry: %+v", o)
	}

	o = classify(jc, boom, RetryPolicy{Factor: -1}, time.Second, time.Second, half)
	if o.Action != ActionDeadLetter || !strings.Contains(o.Reason, "invalid retry policy") {
		t.Errorf("invalid policy from a handler: %+v", o)
	}

	o = classify(jc, &PanicError{Value: "oops"}, policy, time.Second, time.Second, half)
	if o.Action != ActionRetry {
		t.Errorf("panic: %+v", o)
	}
}

// Job kinds for the dispatcher tests.

type plainArgs struct{ N int }

func (plainArgs) Kind() string  { return "plain" }
func (plainArgs) Queue() string { return "q1" }

type typedPolicyArgs struct{ N int }

func (typedPolicyArgs) Kind() string             { return "typed" }
func (typedPolicyArgs) Queue() string            { return "q1" }
func (typedPolicyArgs) RetryPolicy() RetryPolicy { return RetryPolicy{MaxAttempts: 4} }

type ptrArgs struct{ S string }

func (*ptrArgs) Kind() string  { return "ptr" }
func (*ptrArgs) Queue() string { return "q2" }

// policyWorker picks its policy from the payload.
type policyWorker struct{}

func (policyWorker) Work(context.Context, *Job[typedPolicyArgs]) error { return errors.New("no") }
func (policyWorker) RetryPolicy(j *Job[typedPolicyArgs]) RetryPolicy {
	if j.Args.N > 0 {
		return RetryPolicy{MaxAttempts: j.Args.N}
	}
	return RetryPolicy{MaxAttempts: 7}
}

type timeoutWorker struct{}

func (timeoutWorker) Work(ctx context.Context, _ *Job[plainArgs]) error {
	<-ctx.Done()
	return ctx.Err()
}
func (timeoutWorker) Timeout(*Job[plainArgs]) time.Duration { return 20 * time.Millisecond }

func envelopeBody(t *testing.T, kind, queue string, attempt int, payload any) []byte {
	t.Helper()
	p, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(Envelope{JobID: jobutil.NewID(), JobType: kind, Queue: queue, Attempt: attempt, EnqueuedAtMs: time.Now().UnixMilli(), Payload: p, CorrelationID: "corr"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDispatcherPrecedence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fail := func(context.Context, *Job[plainArgs]) error { return errors.New("no") }

	// Plain kind: no job-supplied policy.
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[plainArgs](fail))
	AddWorker[typedPolicyArgs](ws, WorkFunc[typedPolicyArgs](func(context.Context, *Job[typedPolicyArgs]) error { return errors.New("no") }))
	attempts := func(d *Dispatcher, kind string, payload any) int {
		t.Helper()
		o := d.Dispatch(ctx, "q1", envelopeBody(t, kind, "p.q1", 1, payload))
		return o.Job.MaxAttempts
	}
	mk := func(o *WorkerOptions) *Dispatcher {
		t.Helper()
		d, err := NewDispatcher(ws, o)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if got := attempts(mk(nil), "plain", plainArgs{}); got != DefaultMaxAttempts {
		t.Errorf("built-in default: %d", got)
	}
	if got := attempts(mk(&WorkerOptions{Retry: &RetryPolicy{MaxAttempts: 5}}), "plain", plainArgs{}); got != 5 {
		t.Errorf("worker default: %d", got)
	}
	if got := attempts(mk(&WorkerOptions{Retry: &RetryPolicy{MaxAttempts: 5}}), "typed", typedPolicyArgs{}); got != 4 {
		t.Errorf("job type default beats the worker default: %d", got)
	}
	// The queue's default (QueueConfig.Retry, which a pool hands its
	// dispatcher) sits between the job type default and the worker default.
	withQueueDefault := mk(&WorkerOptions{Retry: &RetryPolicy{MaxAttempts: 5}})
	withQueueDefault.queueRetry = map[string]*RetryPolicy{"q1": {MaxAttempts: 6}}
	if got := attempts(withQueueDefault, "plain", plainArgs{}); got != 6 {
		t.Errorf("queue default beats the worker default: %d", got)
	}
	if got := attempts(withQueueDefault, "typed", typedPolicyArgs{}); got != 4 {
		t.Errorf("job type default beats the queue default: %d", got)
	}
	if o := withQueueDefault.Dispatch(ctx, "q2", envelopeBody(t, "plain", "p.q2", 1, plainArgs{})); o.Job.MaxAttempts != 5 {
		t.Errorf("another queue's default applied: %d", o.Job.MaxAttempts)
	}
	byQueue := &WorkerOptions{Retry: &RetryPolicy{MaxAttempts: 5}, RetryByQueue: map[string]RetryPolicy{"q1": {MaxAttempts: 3}}}
	if got := attempts(mk(byQueue), "typed", typedPolicyArgs{}); got != 3 {
		t.Errorf("queue override beats the job type default: %d", got)
	}
	byKind := &WorkerOptions{RetryByQueue: map[string]RetryPolicy{"q1": {MaxAttempts: 3}}, RetryByKind: map[string]RetryPolicy{"typed": {MaxAttempts: 2}}}
	if got := attempts(mk(byKind), "typed", typedPolicyArgs{}); got != 2 {
		t.Errorf("kind override beats the queue override: %d", got)
	}
	if got := attempts(mk(byKind), "plain", plainArgs{}); got != 3 {
		t.Errorf("kind override of another kind does not apply: %d", got)
	}

	// The handler's own policy, seeing the payload, beats everything.
	ws2 := NewWorkers()
	AddWorker[typedPolicyArgs](ws2, policyWorker{})
	d2, err := NewDispatcher(ws2, byKind)
	if err != nil {
		t.Fatal(err)
	}
	if got := attempts(d2, "typed", typedPolicyArgs{N: 9}); got != 9 {
		t.Errorf("handler policy from the payload: %d", got)
	}
	if got := attempts(d2, "typed", typedPolicyArgs{}); got != 7 {
		t.Errorf("handler policy: %d", got)
	}
}

func TestDispatcherOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex // an abandoned handler still runs beside the next
	// release lets the handler that ignores its context return once the
	// test is over: until then Dispatch can only return by abandoning it.
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var seen JobContext
	var fromCtx JobContext
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[plainArgs](func(ctx context.Context, j *Job[plainArgs]) error {
		mu.Lock()
		seen = j.JobContext
		fromCtx, _ = JobContextFrom(ctx)
		mu.Unlock()
		switch j.Args.N {
		case 0:
			return nil
		case 1:
			panic("kaboom")
		case 2:
			return JobFatal(errors.New("bad input"))
		case 3:
			return JobDefer(1500*time.Millisecond, "Retry-After: 2")
		case 4:
			<-release // ignores its context
			return nil
		}
		return fmt.Errorf("failure %d", j.Args.N)
	}))
	AddWorker(ws, WorkFunc[*ptrArgs](func(_ context.Context, j *Job[*ptrArgs]) error {
		if j.Args.S != "hello" {
			return fmt.Errorf("got %q", j.Args.S)
		}
		return nil
	}))
	d, err := NewDispatcher(ws, &WorkerOptions{JobTimeout: 50 * time.Millisecond, Retry: &RetryPolicy{MaxAttempts: 3, Base: 100 * time.Millisecond}, RetryGranularity: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	o := d.Dispatch(ctx, "q1", envelopeBody(t, "plain", "p.q1", 1, plainArgs{N: 0}))
	if o.Action != ActionAck {
		t.Fatalf("success: %+v", o)
	}
	mu.Lock()
	first, firstCtx := seen, fromCtx
	mu.Unlock()
	if first.Type != "plain" || first.Queue != "p.q1" || first.Attempt != 1 || first.MaxAttempts != 3 || first.CorrelationID != "corr" || first.ID == "" || first.IsLastAttempt() {
		t.Errorf("job context: %+v", first)
	}
	if firstCtx != first {
		t.Errorf("context carries %+v, job has %+v", firstCtx, first)
	}
	if age := first.Age(); age < 0 || age > time.Minute {
		t.Errorf("age %s", age)
	}

	o = d.Dispatch(ctx, "q1", envelopeBody(t, "plain", "p.q1", 1, plainArgs{N: 1}))
	if o.Action != ActionRetry || !errors.Is(o.Err, ErrJobPanicked) || o.HoldTTL < 100*time.Millisecond || o.HoldTTL > 100*time.Millisecond {
		t.Errorf("panic: %+v", o)
	}
	var pe *PanicError
	if !errors.As(o.Err, &pe) || pe.Value != "kaboom" || len(pe.Stack) == 0 {
		t.Errorf("panic error: %#v", o.Err)
	}

	o = d.Dispatch(ctx, "q1", envelopeBody(t, "plain", "p.q1", 1, plainArgs{N: 2}))
	if o.Action != ActionDeadLetter || o.Reason != "fatal error: bad input" {
		t.Errorf("fatal: %+v", o)
	}

	o = d.Dispatch(ctx, "q1", envelopeBody(t, "plain", "p.q1", 3, plainArgs{N: 3}))
	if o.Action != ActionDefer || o.HoldTTL != 2*time.Second || o.Reason != "Retry-After: 2" || o.Job.Attempt != 3 {
		t.Errorf("defer: %+v", o)
	}

	// The handler blocks until the test ends, so Dispatch returning at all
	// shows that it was abandoned at its timeout.
	o = d.Dispatch(ctx, "q1", envelopeBody(t, "plain", "p.q1", 1, plainArgs{N: 4}))
	if o.Action != ActionRetry || !errors.Is(o.Err, ErrJobTimedOut) {
		t.Errorf("timeout: %+v", o)
	}

	o = d.Dispatch(ctx, "q1", envelopeBody(t, "plain", "p.q1", 3, plainArgs{N: 5}))
	if o.Action != ActionDeadLetter || o.Reason != "max attempts (3) exhausted after attempt 3: failure 5" || o.Job.Attempt != 3 {
		t.Errorf("exhausted: %+v", o)
	}

	o = d.Dispatch(ctx, "q2", envelopeBody(t, "ptr", "p.q2", 1, ptrArgs{S: "hello"}))
	if o.Action != ActionAck {
		t.Errorf("pointer args: %+v", o)
	}

	o = d.Dispatch(ctx, "q1", []byte("not json"))
	if o.Action != ActionDeadLetter || o.Reason != ReasonMalformedEnvelope || !errors.Is(o.Err, errMalformedEnvelope) || o.env != nil {
		t.Errorf("malformed: %+v", o)
	}

	o = d.Dispatch(ctx, "q1", envelopeBody(t, "nobody", "p.q1", 1, plainArgs{}))
	if o.Action != ActionDeadLetter || o.Reason != "no handler for job type `nobody`" || o.Job.Type != "nobody" {
		t.Errorf("unknown kind: %+v", o)
	}

	o = d.Dispatch(ctx, "q1", envelopeBody(t, "plain", "p.q1", 1, map[string]string{"N": "not a number"}))
	if o.Action != ActionDeadLetter || !strings.HasPrefix(o.Reason, "decode error: ") {
		t.Errorf("undecodable payload: %+v", o)
	}

	// A worker's own timeout overrides the pool's.
	ws2 := NewWorkers()
	AddWorker[plainArgs](ws2, timeoutWorker{})
	d2, err := NewDispatcher(ws2, &WorkerOptions{JobTimeout: time.Hour, ConsumerTimeout: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The error names the timeout that ran out: the worker's 20 ms, not the
	// pool's hour. The parent's deadline only keeps a broken override from
	// hanging the test for that hour.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	o = d2.Dispatch(wctx, "q1", envelopeBody(t, "plain", "p.q1", 1, plainArgs{}))
	if o.Action != ActionRetry || !errors.Is(o.Err, ErrJobTimedOut) || !strings.Contains(o.Err.Error(), "after 20ms") {
		t.Errorf("worker timeout: %+v", o)
	}
}

func TestWorkersRefuseTwoWorkersForOneKind(t *testing.T) {
	t.Parallel()
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[plainArgs](func(context.Context, *Job[plainArgs]) error { return nil }))
	AddWorker(ws, WorkFunc[plainArgs](func(context.Context, *Job[plainArgs]) error { return nil }))
	_, err := NewDispatcher(ws, nil)
	if err == nil || !strings.Contains(err.Error(), `job kind "plain" has two workers`) {
		t.Errorf("got %v", err)
	}
	if _, err := NewDispatcher(NewWorkers(), nil); err == nil {
		t.Error("an empty registry was accepted")
	}
	ws = NewWorkers()
	AddWorker(ws, WorkFunc[plainArgs](func(context.Context, *Job[plainArgs]) error { return nil }))
	if _, err := NewDispatcher(ws, &WorkerOptions{RetryByKind: map[string]RetryPolicy{"plian": {}}}); err == nil {
		t.Error("an override for an unregistered kind was accepted")
	}
	if _, err := NewDispatcher(ws, &WorkerOptions{RetryGranularity: 1500 * time.Microsecond}); err == nil {
		t.Error("a granularity below whole milliseconds was accepted")
	}
}

type emptyKindArgs struct{}

func (emptyKindArgs) Kind() string  { return "" }
func (emptyKindArgs) Queue() string { return "q" }

func TestWorkersRefuseEmptyKind(t *testing.T) {
	t.Parallel()
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[emptyKindArgs](func(context.Context, *Job[emptyKindArgs]) error { return nil }))
	if _, err := NewDispatcher(ws, nil); err == nil || !strings.Contains(err.Error(), "Kind returns an empty string") {
		t.Errorf("got %v", err)
	}
}

// A handler interrupted by its parent context (the pool's Stop running out of
// time) has not had an attempt: whether it is abandoned or returns the
// cancellation, the job goes back unchanged, even on its last attempt.
func TestDispatcherRequeuesAJobInterruptedByItsParent(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[plainArgs](func(ctx context.Context, j *Job[plainArgs]) error {
		switch j.Args.N {
		case 0:
			<-release // ignores its context: abandoned
			return nil
		}
		<-ctx.Done()
		return fmt.Errorf("smtp: %w", ctx.Err())
	}))
	d, err := NewDispatcher(ws, &WorkerOptions{Retry: &RetryPolicy{MaxAttempts: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, n := range []int{0, 1} {
		o := d.Dispatch(ctx, "q1", envelopeBody(t, "plain", "p.q1", 2, plainArgs{N: n}))
		if o.Action != ActionRequeue || o.Job.Attempt != 2 || !errors.Is(o.Err, context.Canceled) || o.env == nil {
			t.Errorf("handler %d: %+v, want a requeue at attempt 2", n, o)
		}
	}
}
