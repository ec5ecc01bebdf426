package queuey

import (
	"context"
	"time"
)

// JobContext is what a handler knows about the delivery it is working on,
// beyond the job's arguments. A worker fills it from the envelope; a unit
// test builds one as a struct literal (or through queueytest).
type JobContext struct {
	// Attempt is the 1-based attempt this run is: 1 the first time, 2 on
	// the first retry. Deferrals do not count.
	Attempt int
	// CorrelationID ties the job to whatever caused it; empty when the
	// producer gave none.
	CorrelationID string
	// Deferrals is how often the job was deferred before this run.
	Deferrals int
	// EnqueuedAt is when the job was first enqueued. Retries and deferrals
	// keep it.
	EnqueuedAt time.Time
	// ID is the job's id (a UUID), the same on every attempt.
	ID string
	// MaxAttempts is how many attempts the resolved retry policy allows,
	// the first included.
	MaxAttempts int
	// Priority is the AMQP priority the job was delivered with. RabbitMQ
	// delivers higher numbers first; a deferred job comes back at the
	// queue's max priority.
	Priority uint8
	// Queue is the broker name of the work queue the job was taken from.
	Queue string
	// Type is the job's kind, as returned by its JobArgs.Kind.
	Type string
}

// Age is how long ago the job was first enqueued. It is zero when EnqueuedAt
// is unset.
func (c JobContext) Age() time.Duration {
	if c.EnqueuedAt.IsZero() {
		return 0
	}
	return time.Since(c.EnqueuedAt)
}

// IsLastAttempt reports whether a failure of this run dead-letters the job
// rather than retrying it. A deferral is not a failure: a job may defer on
// its last attempt and still have it.
func (c JobContext) IsLastAttempt() bool { return c.Attempt >= c.MaxAttempts }

// jobContextFromEnvelope fills a JobContext from a decoded envelope, all but
// MaxAttempts, which comes from the retry policy resolved for the job.
func jobContextFromEnvelope(env Envelope) JobContext {
	var at time.Time
	if env.EnqueuedAtMs > 0 {
		at = time.UnixMilli(env.EnqueuedAtMs)
	}
	return JobContext{
		Attempt:       env.Attempt,
		CorrelationID: env.CorrelationID,
		Deferrals:     env.Deferrals,
		EnqueuedAt:    at,
		ID:            env.JobID,
		Priority:      env.Priority,
		Queue:         env.Queue,
		Type:          env.JobType,
	}
}

type jobContextKey struct{}

// WithJobContext returns a context carrying jc, as the worker passes to every
// handler, so that code below the handler (middleware, a logger) can read it
// with JobContextFrom.
func WithJobContext(ctx context.Context, jc JobContext) context.Context {
	return context.WithValue(ctx, jobContextKey{}, jc)
}

// JobContextFrom returns the JobContext a worker put into ctx, and false when
// ctx did not come from a worker.
func JobContextFrom(ctx context.Context) (JobContext, bool) {
	jc, ok := ctx.Value(jobContextKey{}).(JobContext)
	return jc, ok
}
