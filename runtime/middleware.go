package queuey

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// Middleware, in the shape net/http, asynq and river users know: a function
// that takes the next handler and returns one that wraps it.
//
// A worker's middleware (WorkerOptions.Middleware) wraps every run of a
// handler. The first in the list is the outermost: with [A, B], a run is
// A(B(handler)). The chain runs inside the job's timeout and its panic
// recovery: its context has the job's deadline, and a panic in a middleware
// is the run's panic (retried, as a handler's). A middleware sees the job in
// its JobRun, may add values to the context it passes on, and sees the
// handler's error, which it may change: what it returns is what the worker
// settles the delivery by. A delivery that never reaches a handler (a body
// that is not an envelope, a kind no worker handles, a payload that does not
// decode) runs no middleware; WorkerOptions.OnSettled sees every delivery,
// those included, once it is settled.
//
// A producer's middleware (ProducerOptions.Middleware) wraps every enqueue
// call (Enqueue, EnqueueAfter, Defer, EnqueueBatch): once per call, with all
// the jobs of that call, their ids already given. It may add headers to each
// job before it calls next, and sees the call's error: nil when every job was
// confirmed, a *BatchError for a batch some of whose jobs were not. The
// first in the list is the outermost. The worker's own publishes (retries,
// deferrals, dead letters) are not enqueue calls and run no middleware; they
// keep the headers the job was delivered with.
//
// With no middleware installed nothing changes: no JobRun or EnqueueCall is
// built.

// JobRun is one run of a handler, as a worker's middleware sees it.
type JobRun struct {
	// Job is what the handler is told about the job (JobContext).
	Job JobContext
	// Headers are the headers the job was delivered with: the ones a
	// producer's middleware added (trace context, say), plus queuey's own.
	// Read them; changing them changes nothing.
	Headers amqp.Table
	// ReadyAt is when the job was meant to become runnable: when it was
	// enqueued, or, for a job that went through a hold queue (a delay, a
	// retry, a deferral), when its hold queue was to release it. The time
	// from ReadyAt to the start of the run is how late the job started.
	ReadyAt time.Time
	// Received is when the worker took the delivery from the broker.
	Received time.Time

	// work runs the handler, with the context it is given.
	work func(ctx context.Context, jc JobContext) error
	// ctx is the context the handler was called with, for the records
	// written about the job once it is settled (see Settlement.Context).
	// Atomic: a handler abandoned at its timeout may be reaching it still.
	ctx atomic.Pointer[context.Context]
}

// context is the context the handler was called with, or nil when the
// chain has not called it (yet).
func (r *JobRun) context() context.Context {
	if c := r.ctx.Load(); c != nil {
		return *c
	}
	return nil
}

// JobHandler runs one job; the innermost of a worker's chain is the job's
// handler.
type JobHandler func(ctx context.Context, run *JobRun) error

// WorkerMiddleware wraps a JobHandler; see the comment at the top of this
// file for its contract.
type WorkerMiddleware func(next JobHandler) JobHandler

// chainWorker composes mws around the handler call, the first outermost.
func chainWorker(mws []WorkerMiddleware) JobHandler {
	h := JobHandler(func(ctx context.Context, run *JobRun) error {
		run.ctx.Store(&ctx)
		return run.work(ctx, run.Job)
	})
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// Settlement is what WorkerOptions.OnSettled is told about a delivery the
// pool has settled.
type Settlement struct {
	// Context is the context the handler ran with, carrying what the
	// middleware added to it (a span, say), when a handler ran; the pool's
	// otherwise.
	Context context.Context
	// Outcome is what the worker decided.
	Outcome Outcome
	// Queue is the broker name of the work queue the delivery came from
	// (Outcome.Job.Queue is the envelope's, and empty for a malformed one).
	Queue string
	// Headers are the headers the delivery came with.
	Headers amqp.Table
	// ReadyAt is as in JobRun; zero for a malformed envelope.
	ReadyAt time.Time
	// Received is when the worker took the delivery; Took how long it
	// took from then to the end of the handler's run.
	Received time.Time
	Took     time.Duration
	// Err is nil when the outcome was carried out; otherwise why it was
	// not, and the delivery went back to its queue to be delivered again.
	Err error
}

// ReasonClass sorts dead letters (and the failed runs before them) for
// metrics and alerts, with few values, unlike Reason:
//
//	malformed         the body was not an envelope, or its payload did not
//	                  decode into the worker's args
//	unknown_kind      no worker is registered for the job's kind
//	fatal             the handler returned JobFatal (or the retry policy
//	                  could not be followed)
//	exhausted         the job failed on its last attempt
//	died              the job's last attempt never finished: its worker died
//	                  during it (or lost its connection) as often as its policy
//	                  allows attempts (ErrWorkerDied)
//	deferral_refused  the handler deferred for longer than a hold queue holds
//
// and "" for an outcome that is not a dead letter.
type ReasonClass string

// The reason classes; see ReasonClass.
const (
	ReasonClassMalformed       ReasonClass = "malformed"
	ReasonClassUnknownKind     ReasonClass = "unknown_kind"
	ReasonClassFatal           ReasonClass = "fatal"
	ReasonClassExhausted       ReasonClass = "exhausted"
	ReasonClassDeferralRefused ReasonClass = "deferral_refused"
	ReasonClassDied            ReasonClass = "died"
)

// ReasonClass is the class of o's dead-letter reason; "" unless o is a
// dead letter.
func (o Outcome) ReasonClass() ReasonClass {
	if o.Action != ActionDeadLetter {
		return ""
	}
	r := o.Reason
	switch {
	case r == ReasonMalformedEnvelope, strings.HasPrefix(r, ReasonDecodeError):
		return ReasonClassMalformed
	case strings.HasPrefix(r, ReasonUnknownJobType):
		return ReasonClassUnknownKind
	case errors.Is(o.Err, ErrWorkerDied):
		return ReasonClassDied
	case strings.HasPrefix(r, "max attempts ("):
		return ReasonClassExhausted
	case strings.HasPrefix(r, "deferral refused"):
		return ReasonClassDeferralRefused
	}
	return ReasonClassFatal
}

// OutgoingJob is one job of an enqueue call, as a producer's middleware sees
// it.
type OutgoingJob struct {
	// ID is the job's id, as the call returns it.
	ID string
	// Type is the job's kind.
	Type string
	// Queue is the logical queue the job goes to, as the caller named it.
	Queue string
	// WorkQueue is the broker name of that queue: the routing key of a job
	// enqueued now.
	WorkQueue string
	// CorrelationID is the call's, or empty.
	CorrelationID string
	// Delay is how long the job waits in a hold queue before it can run,
	// rounded up to the producer's granularity; 0 for a job enqueued now.
	Delay time.Duration
	// Deferred reports a Defer: the job comes back at the queue's max
	// priority.
	Deferred bool
	// Headers are added to the job's message. A middleware sets them before
	// it calls next; queuey's own headers (x-attempt, x-deferrals, the
	// x-queuey- ones) win over any of the same name.
	Headers amqp.Table
}

// EnqueueCall is one call of Enqueue, EnqueueAfter, Defer or EnqueueBatch.
type EnqueueCall struct {
	// Jobs are the call's jobs, in order: one, or a batch's.
	Jobs []*OutgoingJob
	// Batch reports an EnqueueBatch (of any length, one included).
	Batch bool

	// publish sends the jobs, with their headers as the chain left them.
	publish func(ctx context.Context) error
}

// EnqueueFunc carries out an enqueue call; the innermost of a producer's
// chain publishes the jobs and waits for their confirms.
type EnqueueFunc func(ctx context.Context, call *EnqueueCall) error

// ProducerMiddleware wraps an EnqueueFunc; see the comment at the top of
// this file for its contract.
type ProducerMiddleware func(next EnqueueFunc) EnqueueFunc

// chainProducer composes mws around the publish, the first outermost; nil
// when there are none, so that a producer without middleware builds no
// EnqueueCall.
func chainProducer(mws []ProducerMiddleware) EnqueueFunc {
	if len(mws) == 0 {
		return nil
	}
	h := EnqueueFunc(func(ctx context.Context, call *EnqueueCall) error { return call.publish(ctx) })
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// headerReadyAt is topology.HeaderReadyAt; see readyAt.
const headerReadyAt = topology.HeaderReadyAt

// readyAt is when a delivered job was meant to become runnable: the
// x-queuey-ready-at header a held publish writes (Unix milliseconds), or
// else when it was enqueued.
func readyAt(h amqp.Table, enqueuedAt time.Time) time.Time {
	if ms := headerInt(h, headerReadyAt); ms > 0 {
		return time.UnixMilli(int64(ms))
	}
	return enqueuedAt
}
