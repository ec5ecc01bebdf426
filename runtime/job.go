package queuey

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// JobArgs are the arguments of one kind of job: the payload of its envelope,
// encoded as JSON.
type JobArgs interface {
	// Kind is the job's type: a stable string written into every message,
	// not the Go type's name, so that the type can be renamed without
	// stranding jobs already queued.
	Kind() string
	// Queue is the logical name of the queue jobs of this kind go to (the
	// Name of a QueueConfig, not the broker's queue name).
	Queue() string
}

// JobArgsWithRetryPolicy is implemented by job args that carry a default
// retry policy for their kind. It is consulted below a worker's overrides
// and above the worker's default; see WorkerOptions.
type JobArgsWithRetryPolicy interface {
	JobArgs
	// RetryPolicy is the kind's default policy.
	RetryPolicy() RetryPolicy
}

// Job is one delivery of a job as its handler sees it: the decoded arguments
// and what the worker knows about the delivery.
type Job[T JobArgs] struct {
	JobContext
	// Args are the job's arguments, decoded from the envelope's payload.
	Args T
}

// Worker handles jobs of one kind. Work's result steers the job: nil
// acknowledges it; an error made with JobDefer defers it; one made with
// JobFatal dead-letters it; any other error, a panic or a timeout is
// retried as the retry policy says, and dead-lettered once attempts run out.
type Worker[T JobArgs] interface {
	Work(ctx context.Context, job *Job[T]) error
}

// WorkerWithRetryPolicy is implemented by a worker that chooses a job's
// retry policy itself, having seen its arguments. It takes precedence over
// every other source of a policy. It is called before Work, so
// job.MaxAttempts is not yet set.
type WorkerWithRetryPolicy[T JobArgs] interface {
	Worker[T]
	RetryPolicy(job *Job[T]) RetryPolicy
}

// WorkerWithTimeout is implemented by a worker that sets its own job timeout,
// overriding WorkerOptions.JobTimeout. A zero or negative duration means no
// timeout.
type WorkerWithTimeout[T JobArgs] interface {
	Worker[T]
	Timeout(job *Job[T]) time.Duration
}

// WorkFunc adapts a function to a Worker, as http.HandlerFunc does.
type WorkFunc[T JobArgs] func(ctx context.Context, job *Job[T]) error

// Work calls f.
func (f WorkFunc[T]) Work(ctx context.Context, job *Job[T]) error { return f(ctx, job) }

// ErrJobFatal is matched by every error JobFatal returns.
var ErrJobFatal = errors.New("fatal job error")

// ErrJobTimedOut is matched by the error a worker records for a job that ran
// past its timeout.
var ErrJobTimedOut = errors.New("job timed out")

// ErrJobPanicked is matched by the *PanicError a worker records for a
// handler that panicked.
var ErrJobPanicked = errors.New("job panicked")

// FatalError dead-letters a job at once, whatever attempts it has left: the
// job cannot succeed, so retrying it only delays the dead letter.
type FatalError struct {
	Err error
}

// JobFatal wraps err so that the job is dead-lettered now instead of
// retried. A nil err is reported as "fatal error".
func JobFatal(err error) error {
	if err == nil {
		err = errors.New("fatal error")
	}
	return &FatalError{Err: err}
}

func (e *FatalError) Error() string { return "fatal: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *FatalError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrJobFatal) true.
func (e *FatalError) Is(target error) bool { return target == ErrJobFatal }

// DeferError sends a job back through a hold queue to run again after Delay,
// ahead of the backlog (at the queue's max priority). A deferral is not a
// failure: it does not consume an attempt and the retry policy is not
// consulted. It is the answer to a rate limit's Retry-After.
type DeferError struct {
	// Delay is how long the job waits; the worker rounds it up to its defer
	// granularity.
	Delay time.Duration
	// Reason is logged with the deferral.
	Reason string
}

// JobDefer returns an error that defers the job by delay, giving reason in
// the log. A negative delay counts as zero, which still waits one step of
// the defer granularity.
func JobDefer(delay time.Duration, reason string) error {
	if delay < 0 {
		delay = 0
	}
	return &DeferError{Delay: delay, Reason: reason}
}

func (e *DeferError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("deferred by %s", e.Delay)
	}
	return fmt.Sprintf("deferred by %s: %s", e.Delay, e.Reason)
}

// PanicError is what a worker records for a handler that panicked. It is
// retryable like any ordinary error.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("job panicked: %v", e.Value) }

// Is makes errors.Is(err, ErrJobPanicked) true.
func (e *PanicError) Is(target error) bool { return target == ErrJobPanicked }

// Enqueuer is the part of a Producer that application code enqueues through.
// Code that takes an Enqueuer rather than a *Producer can be unit-tested with
// queueytest.Producer, which records jobs instead of publishing them.
type Enqueuer interface {
	Enqueue(ctx context.Context, queue, jobType string, payload any, opts *EnqueueOptions) (string, error)
	EnqueueAfter(ctx context.Context, queue, jobType string, payload any, delay time.Duration, opts *EnqueueOptions) (string, error)
	Defer(ctx context.Context, queue, jobType string, payload any, delay time.Duration, opts *EnqueueOptions) (string, error)
}

var _ Enqueuer = (*Producer)(nil)

// EnqueueJob enqueues args on the queue its kind names, with its kind as the
// job type: Producer.Enqueue, typed.
func EnqueueJob[T JobArgs](ctx context.Context, p Enqueuer, args T, opts *EnqueueOptions) (string, error) {
	return p.Enqueue(ctx, args.Queue(), args.Kind(), args, opts)
}

// EnqueueJobAfter is Producer.EnqueueAfter, typed.
func EnqueueJobAfter[T JobArgs](ctx context.Context, p Enqueuer, args T, delay time.Duration, opts *EnqueueOptions) (string, error) {
	return p.EnqueueAfter(ctx, args.Queue(), args.Kind(), args, delay, opts)
}

// DeferJob is Producer.Defer, typed.
func DeferJob[T JobArgs](ctx context.Context, p Enqueuer, args T, delay time.Duration, opts *EnqueueOptions) (string, error) {
	return p.Defer(ctx, args.Queue(), args.Kind(), args, delay, opts)
}
