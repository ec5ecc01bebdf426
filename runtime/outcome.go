package queuey

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// Action is what a worker does with a delivery once its handler returned.
type Action int

const (
	// ActionAck acknowledges the delivery: the job is done.
	ActionAck Action = iota + 1
	// ActionRetry publishes the job through a hold queue with attempt+1 at
	// priority 0, then acknowledges the delivery.
	ActionRetry
	// ActionDefer publishes the job through a hold queue with the same
	// attempt, deferrals+1, at the queue's max priority, then acknowledges
	// the delivery.
	ActionDefer
	// ActionDeadLetter publishes the delivery to the queue's dead-letter
	// queue with the reason, then acknowledges it.
	ActionDeadLetter
	// ActionRequeue returns the delivery to its queue as it is (a nack with
	// requeue), to be delivered again at the same attempt: the handler was
	// interrupted because the job's parent context ended (a worker pool's
	// Stop ran out of time), and a shutdown is not an attempt.
	ActionRequeue
)

func (a Action) String() string {
	switch a {
	case ActionAck:
		return "ack"
	case ActionRetry:
		return "retry"
	case ActionDefer:
		return "defer"
	case ActionDeadLetter:
		return "dead-letter"
	case ActionRequeue:
		return "requeue"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Dead-letter reasons, as written into the x-death-reason header. Their
// texts are the original queuey's (Rust, 1.x), so that an alert written
// against one fleet's dead letters matches the other's:
//
//	malformed envelope                                   (ReasonMalformedEnvelope)
//	no handler for job type `{type}`                     (ReasonUnknownJobType, then the type)
//	decode error: {err}                                  (ReasonDecodeError, then the error)
//	fatal error: {err}                                   (ReasonFatal, then the error)
//	max attempts ({max}) exhausted after attempt {n}: {err}
//
// where a retried error that was a timeout reads "job timed out after
// {limit}: ..." and a panic "handler panicked: {value}".
const (
	// ReasonMalformedEnvelope: the body was not a queuey envelope; it is
	// copied to the dead-letter queue verbatim.
	ReasonMalformedEnvelope = "malformed envelope"
	// ReasonUnknownJobType starts the reason of a job no worker is
	// registered for; the job type follows, in backquotes.
	ReasonUnknownJobType = "no handler for job type"
	// ReasonDecodeError starts the reason of a job whose payload does not
	// decode into its worker's args.
	ReasonDecodeError = "decode error: "
	// ReasonFatal starts the reason of a job its handler failed with
	// JobFatal; the wrapped error follows.
	ReasonFatal = "fatal error: "
	// ReasonDeliveryLimit starts the reason of a job a quorum work queue
	// redelivered so often that one more return would reach its delivery
	// limit, after which RabbitMQ drops a message (see
	// topology.LastDeliveries). It is dead-lettered without running.
	ReasonDeliveryLimit = "delivery limit: "
)

// ErrDeliveryLimit is the error of a job dead-lettered with
// ReasonDeliveryLimit. It also matches ErrWorkerDied: every redelivery
// before it was of a run that never settled.
var ErrDeliveryLimit = errors.New("job is at its quorum queue's delivery limit")

// unknownJobTypeReason is the reason of a job no worker handles.
func unknownJobTypeReason(jobType string) string {
	return ReasonUnknownJobType + " `" + jobType + "`"
}

// reasonText is err as a dead-letter reason quotes it: a panic as the
// original's "handler panicked", with the value it panicked with.
func reasonText(err error) string {
	var pe *PanicError
	if errors.As(err, &pe) {
		return fmt.Sprintf("handler panicked: %v", pe.Value)
	}
	return err.Error()
}

// Outcome is the decision a worker took on one delivery: the same value for
// the worker pool, which then publishes and settles it, and for the test
// double in queueytest, which only reports it.
type Outcome struct {
	// Action is what happens to the delivery.
	Action Action
	// Delay is the delay before the job runs again: for a retry the policy's
	// (jittered) delay, for a deferral the one the handler asked for.
	Delay time.Duration
	// Err is what the handler returned; a panic is a *PanicError, a timeout
	// matches ErrJobTimedOut. For a malformed envelope or an unknown job
	// type it says what was wrong. Nil for an ack.
	Err error
	// HoldTTL is Delay rounded up to the worker's granularity: the TTL, and
	// so the name, of the hold queue the job passes through.
	HoldTTL time.Duration
	// Job describes the delivery; zero for a malformed envelope.
	Job JobContext
	// Policy is the retry policy that was resolved for the job.
	Policy RetryPolicy
	// Reason is the deferral's reason, or the dead letter's x-death-reason.
	Reason string

	// env is the decoded envelope, nil for a malformed one; the pool
	// republishes from it.
	env *Envelope
	// ctx is the context the handler ran with, through the middleware;
	// nil when no handler ran or there is no middleware.
	ctx context.Context
	// died, when above 0, is how many runs of the job never settled, this
	// delivery's predecessor included: the job was redelivered, not run
	// (see diedOutcome). Its retry carries it in topology.HeaderDied.
	died int
}

// Dispatcher is the decision half of a worker pool, without a broker: it
// decodes a body, finds the job's worker, resolves the retry policy and the
// timeout, runs the worker with panics recovered, and returns the Outcome.
// WorkerPool uses one for every delivery; queueytest uses one to show a unit
// test what the pool would do.
type Dispatcher struct {
	workers *Workers
	opts    WorkerOptions
	// queueRetry holds the QueueConfig.Retry of the pool's queues, by
	// logical name; empty for a dispatcher without a queue set.
	queueRetry map[string]*RetryPolicy
	// chain is the options' middleware around the handler; nil when there
	// is none.
	chain JobHandler
}

// NewDispatcher checks the registry and the options the way building a pool
// does: two workers for one kind, an override for a kind nobody handles, or
// a policy that cannot be followed is an error. Options.Queues and the
// logger are not used.
func NewDispatcher(workers *Workers, opts *WorkerOptions) (*Dispatcher, error) {
	if err := workers.validate(); err != nil {
		return nil, err
	}
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	for kind := range o.RetryByKind {
		if _, ok := workers.handlers[kind]; !ok {
			return nil, fmt.Errorf("retry override for job kind %q: no worker handles that kind (registered: %v)", kind, workers.Kinds())
		}
	}
	d := &Dispatcher{workers: workers, opts: o}
	if len(o.Middleware) > 0 {
		d.chain = chainWorker(o.Middleware)
	}
	return d, nil
}

// Dispatch handles one message body taken from the logical queue queue and
// returns what to do with it. ctx is the job's parent context: cancelling it
// cancels the handler's, and a handler that does not finish because of it
// (it is abandoned, or it fails with context.Canceled) is not counted as an
// attempt: the outcome is ActionRequeue.
func (d *Dispatcher) Dispatch(ctx context.Context, queue string, body []byte) Outcome {
	return d.dispatch(ctx, queue, body, nil, redeliveryNone, time.Now(), nil)
}

// redeliveryKind is what the pool knows of a delivery the broker marked
// redelivered.
type redeliveryKind uint8

const (
	// redeliveryNone: not a redelivery, or one that is not an attempt
	// (a bystander of a consumer timeout): it runs.
	redeliveryNone redeliveryKind = iota
	// redeliveryDied: its last run never settled; its worker died or
	// lost its connection (diedOutcome).
	redeliveryDied
	// redeliveryOverran: its last run outlived the broker's
	// consumer_timeout, which closed its channel (diedOutcome).
	redeliveryOverran
	// redeliveryLast: a quorum queue redelivered it so often that the
	// broker would drop it after one more return (lastOutcome).
	redeliveryLast
)

// dispatch is Dispatch of a delivery with headers, received at received.
// A delivery the broker redelivered as an attempt (why) is not run: see
// diedOutcome.
// The handler runs on r's goroutine (nil: a new one).
func (d *Dispatcher) dispatch(ctx context.Context, queue string, body []byte, headers amqp.Table, why redeliveryKind, received time.Time, r *runner) Outcome {
	env, err := decodeEnvelope(body)
	if err != nil {
		return Outcome{Action: ActionDeadLetter, Reason: ReasonMalformedEnvelope, Err: err}
	}
	return d.dispatchEnvelope(ctx, queue, env, headers, why, received, r)
}

// DispatchEnvelope is Dispatch for an envelope already decoded.
func (d *Dispatcher) DispatchEnvelope(ctx context.Context, queue string, env Envelope) Outcome {
	return d.dispatchEnvelope(ctx, queue, env, nil, redeliveryNone, time.Now(), nil)
}

func (d *Dispatcher) dispatchEnvelope(ctx context.Context, queue string, env Envelope, headers amqp.Table, why redeliveryKind, received time.Time, r *runner) Outcome {
	jc := jobContextFromEnvelope(env)
	h, ok := d.workers.handlers[env.JobType]
	if !ok {
		return Outcome{Action: ActionDeadLetter, Reason: unknownJobTypeReason(env.JobType), Job: jc, env: &env,
			Err: fmt.Errorf("no worker is registered for job type %q", env.JobType)}
	}
	p, err := h.prepare(env.Payload, jc)
	if err != nil {
		err = fmt.Errorf("payload of job type %q does not decode: %w", env.JobType, err)
		return Outcome{Action: ActionDeadLetter, Reason: ReasonDecodeError + err.Error(), Job: jc, env: &env, Err: err}
	}
	cands := retryCandidates{handler: p.handlerPolicy, jobType: p.jobTypePolicy, queueDefault: d.queueRetry[queue], workerDefault: d.opts.Retry}
	if rp, ok := d.opts.RetryByKind[env.JobType]; ok {
		cands.kindOverride = &rp
	}
	if rp, ok := d.opts.RetryByQueue[queue]; ok {
		cands.queueOverride = &rp
	}
	policy, _ := cands.resolve()
	jc.MaxAttempts = policy.Attempts()
	switch why {
	case redeliveryDied:
		o := diedOutcome(jc, headerInt(headers, topology.HeaderDied)+1, policy, d.opts.RetryGranularity, nil)
		o.env = &env
		return o
	case redeliveryLast:
		o := lastOutcome(jc, headerInt(headers, topology.HeaderDeliveryCount), policy)
		o.died = headerInt(headers, topology.HeaderDied)
		o.env = &env
		return o
	case redeliveryOverran:
		o := overranOutcome(jc, d.opts.ConsumerTimeout, policy, d.opts.RetryGranularity, nil)
		o.died = headerInt(headers, topology.HeaderDied)
		o.env = &env
		return o
	}

	timeout := d.opts.JobTimeout
	if p.hasTimeout {
		timeout = p.timeout
	}
	var run *JobRun
	work := func(ctx context.Context) error { return p.run(ctx, jc) }
	if d.chain != nil {
		run = &JobRun{Job: jc, Headers: headers, ReadyAt: readyAt(headers, jc.EnqueuedAt), Received: received, work: p.run}
		work = func(ctx context.Context) error { return d.chain(ctx, run) }
	}
	err = runJob(ctx, jc, timeout, r, work)
	var o Outcome
	if ctx.Err() != nil && interrupted(err) {
		o = Outcome{Action: ActionRequeue, Err: err, Job: jc, Policy: policy}
	} else {
		o = classify(jc, err, policy, d.opts.RetryGranularity, d.opts.DeferGranularity, nil)
	}
	o.env = &env
	if run != nil {
		o.ctx = run.context()
	}
	return o
}

// errTimeoutCause tells the job timeout apart from the parent's cancellation.
var errTimeoutCause = errors.New("job timeout")

// AbandonGrace is how long a handler has, once its context is done (its
// timeout passed, or the pool's Stop ran out of time), to return before it
// is abandoned: a handler that returns within it, as one that watches its
// context does, is settled with its own error; one still running after it is
// reported as "handler abandoned" and the delivery is settled without it.
const AbandonGrace = 100 * time.Millisecond

// runJob runs a prepared job with its timeout, recovering a panic. A handler
// that outlives its timeout, or its parent context, by more than
// AbandonGrace is abandoned: the delivery is settled without it, because a
// handler that ignores its context would otherwise hold a delivery, and a
// shutdown, forever. The handler runs on r's goroutine (nil: a new one).
func runJob(ctx context.Context, jc JobContext, timeout time.Duration, r *runner, work func(context.Context) error) error {
	ctx = WithJobContext(ctx, jc)
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, errTimeoutCause)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()

	done := make(chan error, 1)
	r.run(func() {
		defer func() {
			if v := recover(); v != nil {
				done <- &PanicError{Value: v, Stack: debug.Stack()}
			}
		}()
		done <- work(ctx)
	})

	var err error
	select {
	case err = <-done:
		if err == nil {
			return nil // finished, if only just
		}
	case <-ctx.Done():
		grace := time.NewTimer(AbandonGrace)
		select {
		case err = <-done:
			grace.Stop()
			if err == nil {
				return nil // it did the work, a little late
			}
		case <-grace.C:
			r.abandon()
			err = fmt.Errorf("handler abandoned: it had not returned %s after its context ended: %w", AbandonGrace, ctx.Err())
		}
	}
	if context.Cause(ctx) == errTimeoutCause {
		var pe *PanicError
		if !errors.As(err, &pe) {
			return fmt.Errorf("%w after %s: %w", ErrJobTimedOut, timeout, err)
		}
	}
	return err
}

// runner runs the jobs of one handler goroutine, one at a time, on a
// goroutine of their own (runJob abandons a handler that will not return),
// and keeps that goroutine from one job to the next: a new goroutine per job
// grew its stack afresh each time (see serve). A nil runner starts a
// goroutine per job.
type runner struct{ jobs chan func() }

// run hands f to the runner's goroutine, starting one if it has none.
func (r *runner) run(f func()) {
	if r == nil {
		go f()
		return
	}
	if r.jobs == nil {
		r.jobs = make(chan func())
		go func(jobs <-chan func()) {
			for f := range jobs {
				f()
			}
		}(r.jobs)
	}
	r.jobs <- f
}

// abandon leaves the goroutine to a job that would not return: it ends
// once that job does, and the next run starts another. It is also how the
// runner's owner lets the goroutine go when it has no more jobs.
func (r *runner) abandon() {
	if r != nil && r.jobs != nil {
		close(r.jobs)
		r.jobs = nil
	}
}

// interrupted reports whether a handler's result, once the job's parent
// context was cancelled, is that cancellation (the handler was abandoned,
// or returned context.Canceled) rather than a verdict of its own: a fatal
// error, a deferral or a panic stands.
func interrupted(err error) bool {
	if !errors.Is(err, context.Canceled) {
		return false
	}
	var (
		fatal *FatalError
		def   *DeferError
		pe    *PanicError
	)
	return !errors.As(err, &fatal) && !errors.As(err, &def) && !errors.As(err, &pe)
}

// ErrWorkerDied is the error of a job whose run never finished: the broker
// redelivered it, which it does when the worker holding it unsettled died
// or lost its connection. Such a run counts as an attempt.
var ErrWorkerDied = errors.New("worker died during the job")

// diedOutcome is the outcome of a redelivered job, whose run (at
// jc.Attempt) never settled, the died'th such run: a crash loop, unless it
// is counted. The run is an attempt that failed: the job is retried as the
// next attempt (published, then the redelivery acknowledged, like any
// retry), or dead-lettered once its policy's attempts are used up, with a
// reason that says its runs never finished. The handler does not run.
// A give-back (a Stop that ran out of time, a consumer the broker
// cancelled) publishes a copy, which is not a redelivery: it never counts.
func diedOutcome(jc JobContext, died int, policy RetryPolicy, retryGranularity time.Duration, rnd func() float64) Outcome {
	times := "once"
	if died != 1 {
		times = fmt.Sprintf("%d times", died)
	}
	err := fmt.Errorf("%w %s: the broker redelivered it unsettled, as it does when its worker exits or loses its connection mid-job", ErrWorkerDied, times)
	o := classify(jc, err, policy, retryGranularity, 0, rnd)
	if o.Action == ActionDeadLetter && errors.Is(o.Err, ErrWorkerDied) && policy.Validate() == nil {
		o.Reason = fmt.Sprintf("max attempts (%d) exhausted after attempt %d: worker died during the job %s (it never finished)", policy.Attempts(), jc.Attempt, times)
	}
	o.died = died
	return o
}

// lastOutcome is the outcome of a delivery of a quorum work queue that
// carries delivery count count, one that topology.LastDeliveries says must
// not be returned again: a dead letter, unrun, so that the broker's delivery
// limit never drops a job silently.
func lastOutcome(jc JobContext, count int, policy RetryPolicy) Outcome {
	err := fmt.Errorf("%w: the broker redelivered it %d times unsettled (%w), and drops it after %d", ErrDeliveryLimit, count, ErrWorkerDied, topology.WorkDeliveryLimit)
	return Outcome{Action: ActionDeadLetter, Job: jc, Policy: policy, Err: err,
		Reason: fmt.Sprintf("%sredelivered %d times unsettled by a quorum queue whose limit is %d deliveries; dead-lettered without running it, before the broker would drop it",
			ReasonDeliveryLimit, count, topology.WorkDeliveryLimit)}
}

// ErrConsumerTimeoutExceeded is the error of a job whose run outlived the
// broker's consumer_timeout: the broker closed the channel it came on and
// redelivered it. Such a run counts as an attempt.
var ErrConsumerTimeoutExceeded = errors.New("job outlived the broker's consumer timeout")

// overranOutcome is the outcome of a redelivered job whose run stayed
// unacknowledged longer than the broker's consumer_timeout (limit), so
// that the broker closed its channel: a failed attempt, like a run whose
// worker died, since its run's own outcome can no longer be settled.
func overranOutcome(jc JobContext, limit time.Duration, policy RetryPolicy, retryGranularity time.Duration, rnd func() float64) Outcome {
	err := fmt.Errorf("%w (%s): the broker closed its channel and redelivered it; raise consumer_timeout or make the job shorter", ErrConsumerTimeoutExceeded, limit)
	o := classify(jc, err, policy, retryGranularity, 0, rnd)
	if o.Action == ActionDeadLetter && errors.Is(o.Err, ErrConsumerTimeoutExceeded) && policy.Validate() == nil {
		o.Reason = fmt.Sprintf("max attempts (%d) exhausted after attempt %d: %s (%s)", policy.Attempts(), jc.Attempt, ErrConsumerTimeoutExceeded, limit)
	}
	return o
}

// classify turns a handler's result into an outcome. Given rnd it is pure:
// the randomness of the jitter comes in through it (tests pass their own;
// the dispatcher passes nil, math/rand/v2).
func classify(jc JobContext, err error, policy RetryPolicy, retryGranularity, deferGranularity time.Duration, rnd func() float64) Outcome {
	o := Outcome{Job: jc, Err: err, Policy: policy}
	if err == nil {
		o.Action = ActionAck
		return o
	}
	var fatal *FatalError
	if errors.As(err, &fatal) {
		// JobFatal(e) reads "fatal error: e", as the original's; an
		// error wrapping it keeps its context.
		msg := fatal.Err.Error()
		if err != error(fatal) {
			msg = err.Error()
		}
		o.Action, o.Reason = ActionDeadLetter, ReasonFatal+msg
		return o
	}
	var def *DeferError
	if errors.As(err, &def) {
		ttl, herr := topology.HoldTTL(def.Delay, deferGranularity)
		if herr != nil {
			o.Action, o.Err = ActionDeadLetter, fmt.Errorf("deferral refused: %w", herr)
			o.Reason = o.Err.Error()
			return o
		}
		o.Action, o.Delay, o.HoldTTL, o.Reason = ActionDefer, def.Delay, time.Duration(ttl)*time.Millisecond, def.Reason
		return o
	}
	if verr := policy.Validate(); verr != nil {
		o.Action, o.Reason = ActionDeadLetter, fmt.Sprintf("invalid retry policy (%v) after: %v", verr, err)
		return o
	}
	if !policy.Retries(jc.Attempt) {
		o.Action = ActionDeadLetter
		o.Reason = fmt.Sprintf("max attempts (%d) exhausted after attempt %d: %s", policy.Attempts(), jc.Attempt, reasonText(err))
		return o
	}
	o.Delay = policy.Delay(jc.Attempt, rnd)
	ttl, herr := topology.HoldTTL(o.Delay, retryGranularity)
	if herr != nil { // Validate keeps delays in range; this is belt and braces
		o.Action, o.Reason = ActionDeadLetter, fmt.Sprintf("retry refused (%v) after: %v", herr, err)
		return o
	}
	o.Action, o.HoldTTL = ActionRetry, time.Duration(ttl)*time.Millisecond
	return o
}
