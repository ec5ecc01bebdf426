// Package queueytest unit-tests queuey handlers and producers without a
// broker, in the spirit of net/http/httptest.
//
// Worker runs a handler on a job through the same decision code a
// queuey.WorkerPool uses (queuey.Dispatcher): the retry policy is resolved
// with the same precedence but for one level (below), panics and timeouts
// are caught the same way, and the Result says what the pool would have done
// with the delivery: acked it, retried it after which delay, deferred it
// with which delay and reason, dead-lettered it with which reason, or
// returned it to its queue unchanged because the context passed to Work was
// cancelled first (as a pool's Stop does when it runs out of time). Nothing
// is published.
//
// The level a Worker cannot see is the queue's default, QueueConfig.Retry:
// a Worker has no queue set. To test a job of a queue that sets one, pass
// that policy as WorkerOptions.Retry, the level just below it, which ranks
// the same against every other level.
//
// Producer is a queuey.Enqueuer that records jobs instead of publishing
// them, for asserting what the code under test enqueued.
package queueytest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/internal/jobutil"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// Worker runs one queuey.Worker as a worker pool would, without a broker.
type Worker[T queuey.JobArgs] struct {
	disp *queuey.Dispatcher
}

// NewWorker wraps w with the pool options opts (nil for the defaults: retry
// policy, job timeout, granularities). It fails where building a pool would,
// for instance for a retry policy that cannot be followed.
func NewWorker[T queuey.JobArgs](w queuey.Worker[T], opts *queuey.WorkerOptions) (*Worker[T], error) {
	ws := queuey.NewWorkers()
	queuey.AddWorker(ws, w)
	d, err := queuey.NewDispatcher(ws, opts)
	if err != nil {
		return nil, err
	}
	return &Worker[T]{disp: d}, nil
}

// MustNewWorker is NewWorker for a test: it fails tb on an error.
func MustNewWorker[T queuey.JobArgs](tb testing.TB, w queuey.Worker[T], opts *queuey.WorkerOptions) *Worker[T] {
	tb.Helper()
	wk, err := NewWorker(w, opts)
	if err != nil {
		tb.Fatalf("queueytest: %v", err)
	}
	return wk
}

// JobOptions describe the delivery handed to the worker. A nil *JobOptions,
// like the zero value, is the first delivery of a new job.
type JobOptions struct {
	// Attempt is the 1-based attempt the delivery is. Defaults to 1.
	Attempt int
	// CorrelationID is the job's correlation id. Defaults to none.
	CorrelationID string
	// Deferrals is how often the job was deferred before. Defaults to 0.
	Deferrals int
	// EnqueuedAt is when the job was first enqueued. Defaults to now.
	EnqueuedAt time.Time
	// ID is the job's id. Defaults to a new random UUID.
	ID string
	// Priority is the AMQP priority of the delivery. Defaults to 0.
	Priority uint8
	// Prefix is the prefix of the queue set the job's queue belongs to. With
	// it the handler sees in JobContext.Queue the broker name a worker pool
	// gives it, Prefix + "." + the logical name. Defaults to none: the
	// handler sees the logical name. Queue, when set, wins.
	Prefix string
	// Queue is the broker name of the work queue the job came from, as the
	// handler sees it in JobContext.Queue. Defaults to the logical name the
	// job's args return from Queue, joined to Prefix when that is set.
	Queue string
}

// Result is what the pool would have done with one delivery.
type Result struct {
	queuey.Outcome
}

// Acked reports whether the job succeeded.
func (r *Result) Acked() bool { return r.Action == queuey.ActionAck }

// Retried reports whether the job failed and runs again, after HoldTTL.
func (r *Result) Retried() bool { return r.Action == queuey.ActionRetry }

// Deferred reports whether the job was deferred, by HoldTTL, for Reason.
func (r *Result) Deferred() bool { return r.Action == queuey.ActionDefer }

// DeadLettered reports whether the job went to the dead-letter queue, with
// Reason as its x-death-reason.
func (r *Result) DeadLettered() bool { return r.Action == queuey.ActionDeadLetter }

// String describes the result in a line, for test failures and examples.
func (r *Result) String() string {
	switch r.Action {
	case queuey.ActionAck:
		return "acked"
	case queuey.ActionRetry:
		return fmt.Sprintf("retried after %s (attempt %d of %d failed: %v)", r.HoldTTL, r.Job.Attempt, r.Job.MaxAttempts, r.Err)
	case queuey.ActionDefer:
		return fmt.Sprintf("deferred by %s (%s)", r.HoldTTL, r.Reason)
	case queuey.ActionDeadLetter:
		return fmt.Sprintf("dead-lettered (%s)", r.Reason)
	case queuey.ActionRequeue:
		return fmt.Sprintf("returned to the queue unchanged (interrupted: %v)", r.Err)
	}
	return r.Action.String()
}

// Work runs the worker on a job with args, as a delivery described by opts,
// and returns what the pool would have done. The args go through JSON, as
// they would through the broker, so a field that does not survive encoding
// does not reach the handler here either.
func (w *Worker[T]) Work(ctx context.Context, args T, opts *JobOptions) *Result {
	var o JobOptions
	if opts != nil {
		o = *opts
	}
	payload, err := json.Marshal(args)
	if err != nil {
		// The real producer refuses such a job before it is sent.
		return &Result{queuey.Outcome{Action: queuey.ActionDeadLetter, Reason: "payload does not encode", Err: err}}
	}
	if o.Attempt == 0 {
		o.Attempt = 1
	}
	if o.EnqueuedAt.IsZero() {
		o.EnqueuedAt = time.Now()
	}
	if o.ID == "" {
		o.ID = jobutil.NewID()
	}
	if o.Queue == "" {
		o.Queue = args.Queue()
		if o.Prefix != "" {
			o.Queue = topology.WorkName(o.Prefix, o.Queue)
		}
	}
	env := queuey.Envelope{
		JobID:         o.ID,
		JobType:       args.Kind(),
		Queue:         o.Queue,
		Attempt:       o.Attempt,
		EnqueuedAtMs:  o.EnqueuedAt.UnixMilli(),
		Deferrals:     o.Deferrals,
		Priority:      o.Priority,
		CorrelationID: o.CorrelationID,
		Payload:       payload,
	}
	return &Result{w.disp.DispatchEnvelope(ctx, args.Queue(), env)}
}

// WorkBody runs the worker on a raw message body taken from the logical
// queue queue, for testing what happens to a body that is not a queuey
// envelope or a job of another kind.
func (w *Worker[T]) WorkBody(ctx context.Context, queue string, body []byte) *Result {
	return &Result{w.disp.Dispatch(ctx, queue, body)}
}

// RequireAcked fails tb unless r is an ack.
func RequireAcked(tb testing.TB, r *Result) {
	tb.Helper()
	if !r.Acked() {
		tb.Fatalf("queueytest: want the job acked, got %s", r)
	}
}

// RequireRetried fails tb unless r is a retry, and returns the hold TTL the
// retry waits (its delay rounded up to the retry granularity).
func RequireRetried(tb testing.TB, r *Result) time.Duration {
	tb.Helper()
	if !r.Retried() {
		tb.Fatalf("queueytest: want the job retried, got %s", r)
	}
	return r.HoldTTL
}

// RequireDeferred fails tb unless r is a deferral, and returns its hold TTL
// and reason.
func RequireDeferred(tb testing.TB, r *Result) (time.Duration, string) {
	tb.Helper()
	if !r.Deferred() {
		tb.Fatalf("queueytest: want the job deferred, got %s", r)
	}
	return r.HoldTTL, r.Reason
}

// RequireDeadLettered fails tb unless r is a dead letter, and returns its
// reason (the x-death-reason header).
func RequireDeadLettered(tb testing.TB, r *Result) string {
	tb.Helper()
	if !r.DeadLettered() {
		tb.Fatalf("queueytest: want the job dead-lettered, got %s", r)
	}
	return r.Reason
}

// NewJob builds the job a handler would be handed, for calling its Work
// directly. Zero fields of jc get Worker.Work's defaults: attempt 1 of the
// default policy's attempts, a new id, enqueued now, the kind and the
// logical queue of args.
func NewJob[T queuey.JobArgs](args T, jc queuey.JobContext) *queuey.Job[T] {
	if jc.Attempt == 0 {
		jc.Attempt = 1
	}
	if jc.MaxAttempts == 0 {
		jc.MaxAttempts = queuey.RetryPolicy{}.Attempts()
	}
	if jc.ID == "" {
		jc.ID = jobutil.NewID()
	}
	if jc.EnqueuedAt.IsZero() {
		jc.EnqueuedAt = time.Now()
	}
	if jc.Type == "" {
		jc.Type = args.Kind()
	}
	if jc.Queue == "" {
		jc.Queue = args.Queue()
	}
	return &queuey.Job[T]{JobContext: jc, Args: args}
}
