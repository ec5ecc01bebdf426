package queuey

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

type mwArgs struct{ Fail string }

func (mwArgs) Kind() string  { return "mw.job" }
func (mwArgs) Queue() string { return "q1" }

// trail records, in order, what the middleware and the handler did.
type trail struct {
	mu     sync.Mutex
	events []string
}

func (tr *trail) add(e string) { tr.mu.Lock(); tr.events = append(tr.events, e); tr.mu.Unlock() }

func (tr *trail) recorder(name string) WorkerMiddleware {
	return func(next JobHandler) JobHandler {
		return func(ctx context.Context, run *JobRun) error {
			tr.add(name + " before")
			err := next(ctx, run)
			tr.add(fmt.Sprintf("%s after (%v)", name, err))
			return err
		}
	}
}

func mwDispatcher(t *testing.T, work func(ctx context.Context, job *Job[mwArgs]) error, opts *WorkerOptions) *Dispatcher {
	t.Helper()
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[mwArgs](work))
	d, err := NewDispatcher(ws, opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestWorkerMiddlewareRunsFirstOutermostAroundTheHandler(t *testing.T) {
	tr := &trail{}
	d := mwDispatcher(t, func(ctx context.Context, job *Job[mwArgs]) error {
		tr.add("handler")
		return nil
	}, &WorkerOptions{Middleware: []WorkerMiddleware{tr.recorder("A"), tr.recorder("B")}})
	o := d.Dispatch(context.Background(), "q1", envelopeBody(t, "mw.job", "p.q1", 1, mwArgs{}))
	want := []string{"A before", "B before", "handler", "B after (<nil>)", "A after (<nil>)"}
	if o.Action != ActionAck || !slices.Equal(tr.events, want) {
		t.Fatalf("action %v, events %q; want ack and %q", o.Action, tr.events, want)
	}
}

func TestWorkerMiddlewareSeesTheJobAndDecidesTheError(t *testing.T) {
	var seen *JobRun
	// A middleware that forgives one error and makes another fatal.
	mw := func(next JobHandler) JobHandler {
		return func(ctx context.Context, run *JobRun) error {
			seen = run
			err := next(ctx, run)
			switch {
			case err != nil && err.Error() == "forgive":
				return nil
			case err != nil && err.Error() == "fatal":
				return JobFatal(err)
			}
			return err
		}
	}
	d := mwDispatcher(t, func(ctx context.Context, job *Job[mwArgs]) error {
		if job.Args.Fail != "" {
			return errors.New(job.Args.Fail)
		}
		return nil
	}, &WorkerOptions{Middleware: []WorkerMiddleware{mw}})
	ready := time.UnixMilli(time.Now().Add(-time.Second).UnixMilli())
	headers := amqp.Table{topology.HeaderReadyAt: ready.UnixMilli(), "traceparent": "00-abc"}
	received := time.Now()
	o := d.dispatch(context.Background(), "q1", envelopeBody(t, "mw.job", "p.q1", 2, mwArgs{Fail: "forgive"}), headers, redeliveryNone, received, nil)
	if o.Action != ActionAck {
		t.Errorf("forgiven error: action %v, want ack", o.Action)
	}
	if seen == nil || seen.Job.Attempt != 2 || seen.Job.Type != "mw.job" || seen.Headers["traceparent"] != "00-abc" || !seen.ReadyAt.Equal(ready) || !seen.Received.Equal(received) {
		t.Errorf("middleware saw %+v", seen)
	}
	if o := d.Dispatch(context.Background(), "q1", envelopeBody(t, "mw.job", "p.q1", 1, mwArgs{Fail: "fatal"})); o.Action != ActionDeadLetter || o.ReasonClass() != ReasonClassFatal {
		t.Errorf("fatal from middleware: action %v class %q, want a fatal dead letter", o.Action, o.ReasonClass())
	}
	if o := d.Dispatch(context.Background(), "q1", envelopeBody(t, "mw.job", "p.q1", 1, mwArgs{Fail: "other"})); o.Action != ActionRetry {
		t.Errorf("other error: action %v, want retry", o.Action)
	}
}

func TestWorkerMiddlewareRunsInsideTheTimeoutAndThePanicRecovery(t *testing.T) {
	var deadline bool
	type key struct{}
	mw := func(next JobHandler) JobHandler {
		return func(ctx context.Context, run *JobRun) error {
			_, deadline = ctx.Deadline()
			if _, ok := JobContextFrom(ctx); !ok {
				return errors.New("no job context in the middleware's context")
			}
			if run.Job.Attempt == 3 {
				panic("middleware blew up")
			}
			return next(context.WithValue(ctx, key{}, "from middleware"), run)
		}
	}
	var handlerSaw any
	d := mwDispatcher(t, func(ctx context.Context, job *Job[mwArgs]) error {
		handlerSaw = ctx.Value(key{})
		return nil
	}, &WorkerOptions{JobTimeout: time.Minute, Middleware: []WorkerMiddleware{mw}})
	o := d.Dispatch(context.Background(), "q1", envelopeBody(t, "mw.job", "p.q1", 1, mwArgs{}))
	if o.Action != ActionAck || !deadline || handlerSaw != "from middleware" {
		t.Errorf("action %v, deadline %v, handler saw %v", o.Action, deadline, handlerSaw)
	}
	if o.context(nil).Value(key{}) != "from middleware" {
		t.Error("the outcome does not carry the context the handler ran with")
	}
	o = d.Dispatch(context.Background(), "q1", envelopeBody(t, "mw.job", "p.q1", 3, mwArgs{}))
	if o.Action != ActionRetry || !errors.Is(o.Err, ErrJobPanicked) {
		t.Errorf("panicking middleware: action %v err %v, want a retry of a panic", o.Action, o.Err)
	}
}

func TestReasonClass(t *testing.T) {
	for _, c := range []struct {
		o    Outcome
		want ReasonClass
	}{
		{Outcome{Action: ActionAck}, ""},
		{Outcome{Action: ActionRetry, Reason: "x"}, ""},
		{Outcome{Action: ActionDeadLetter, Reason: ReasonMalformedEnvelope}, ReasonClassMalformed},
		{Outcome{Action: ActionDeadLetter, Reason: ReasonDecodeError + "bad"}, ReasonClassMalformed},
		{Outcome{Action: ActionDeadLetter, Reason: unknownJobTypeReason("k")}, ReasonClassUnknownKind},
		{Outcome{Action: ActionDeadLetter, Reason: ReasonFatal + "no"}, ReasonClassFatal},
		{Outcome{Action: ActionDeadLetter, Reason: "invalid retry policy (x) after: y"}, ReasonClassFatal},
		{Outcome{Action: ActionDeadLetter, Reason: "max attempts (3) exhausted after attempt 3: boom"}, ReasonClassExhausted},
		{Outcome{Action: ActionDeadLetter, Reason: "deferral refused: too long"}, ReasonClassDeferralRefused},
	} {
		if got := c.o.ReasonClass(); got != c.want {
			t.Errorf("%v %q: class %q, want %q", c.o.Action, c.o.Reason, got, c.want)
		}
	}
	// classify's own texts land in their classes.
	rp := FixedRetry(1, time.Second)
	if got := diedOutcome(JobContext{Attempt: 1}, 1, rp, time.Second, nil).ReasonClass(); got != ReasonClassDied {
		t.Errorf("a job whose worker died on its last attempt: class %q, want %q", got, ReasonClassDied)
	}
	if got := classify(JobContext{Attempt: 1}, errors.New("boom"), rp, time.Second, time.Second, nil).ReasonClass(); got != ReasonClassExhausted {
		t.Errorf("exhausted: %q", got)
	}
	if got := classify(JobContext{Attempt: 1}, JobDefer(100*24*time.Hour, "later"), rp, time.Second, time.Second, nil).ReasonClass(); got != ReasonClassDeferralRefused {
		t.Errorf("deferral refused: %q", got)
	}
}

func TestProducerMiddlewareWrapsEachCallOnceAndAddsHeaders(t *testing.T) {
	var calls []string
	mw := func(name string) ProducerMiddleware {
		return func(next EnqueueFunc) EnqueueFunc {
			return func(ctx context.Context, call *EnqueueCall) error {
				var ids []string
				for _, j := range call.Jobs {
					ids = append(ids, j.Type+"@"+j.Queue)
					if j.Headers == nil {
						j.Headers = amqp.Table{}
					}
					j.Headers["x-"+name] = j.ID
					j.Headers[topology.HeaderAttempt] = int64(99) // queuey's own header wins
				}
				calls = append(calls, fmt.Sprintf("%s batch=%v %s", name, call.Batch, strings.Join(ids, ",")))
				return next(ctx, call)
			}
		}
	}
	fc := newFakeConfirmer("p.a", "p.b", "p.b.deferred.3000")
	p := fakeProducer(t, fc, nil, &ProducerOptions{Channels: 1, Middleware: []ProducerMiddleware{mw("outer"), mw("inner")}})
	id, err := p.Enqueue(context.Background(), "a", "k1", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.EnqueueAfter(context.Background(), "b", "k2", 2, 3*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p.EnqueueBatch(context.Background(), []BatchJob{{Queue: "a", JobType: "k3"}, {Queue: "b", JobType: "k4"}}); err != nil {
		t.Fatal(err)
	}
	want := []string{"outer batch=false k1@a", "inner batch=false k1@a", "outer batch=false k2@b", "inner batch=false k2@b",
		"outer batch=true k3@a,k4@b", "inner batch=true k3@a,k4@b"}
	if !slices.Equal(calls, want) {
		t.Errorf("calls %q, want %q", calls, want)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	var jobs []amqp.Publishing
	for _, o := range fc.sent {
		if !strings.HasSuffix(o.rk, topology.DivertSuffix) {
			jobs = append(jobs, o.msg)
		}
	}
	if len(jobs) != 4 {
		t.Fatalf("%d jobs sent, want 4", len(jobs))
	}
	if jobs[0].Headers["x-outer"] != id || jobs[0].Headers["x-inner"] != id {
		t.Errorf("first job's headers %v, want x-outer and x-inner = %s", jobs[0].Headers, id)
	}
	for i, m := range jobs {
		if m.Headers[topology.HeaderAttempt] != int64(1) {
			t.Errorf("job %d: x-attempt %v, want queuey's 1", i, m.Headers[topology.HeaderAttempt])
		}
		_, ready := m.Headers[topology.HeaderReadyAt]
		if ready != (i == 1) {
			t.Errorf("job %d: x-queuey-ready-at present %v; want it on the delayed job only", i, ready)
		}
	}
	if got, want := headerInt(jobs[1].Headers, topology.HeaderReadyAt), int(jobs[1].Timestamp.UnixMilli()+3000); got != want {
		t.Errorf("delayed job's ready-at %d, want its timestamp + 3 s = %d", got, want)
	}
}

func TestProducerMiddlewareSeesTheCallsError(t *testing.T) {
	var seen error
	mw := func(next EnqueueFunc) EnqueueFunc {
		return func(ctx context.Context, call *EnqueueCall) error {
			seen = next(ctx, call)
			return seen
		}
	}
	fc := newFakeConfirmer("p.a") // p.b is missing: its jobs are returned
	p := fakeProducer(t, fc, nil, &ProducerOptions{Channels: 1, UnroutableRetry: -1, Middleware: []ProducerMiddleware{mw}})
	_, err := p.EnqueueBatch(context.Background(), []BatchJob{{Queue: "a", JobType: "k"}, {Queue: "b", JobType: "k"}})
	var be *BatchError
	if !errors.As(err, &be) || !errors.Is(seen, ErrUnroutable) || be.Errs[0] != nil || be.Errs[1] == nil {
		t.Errorf("err %v, middleware saw %v; want a *BatchError of the second job", err, seen)
	}
}

func TestProducerStatsReadTheCounters(t *testing.T) {
	p := fakeProducer(t, newFakeConfirmer("p.a"), nil, nil)
	if _, err := p.Enqueue(context.Background(), "a", "k", 1, nil); err != nil {
		t.Fatal(err)
	}
	p.heldRenewals.Add(2)
	p.heldResends.Add(3)
	p.lateConfirms.Add(4)
	if got, want := p.Stats(), (ProducerStats{DivertProbes: 1, LateConfirms: 4, HoldRenewals: 2, HoldResends: 3}); got != want {
		t.Errorf("Stats %+v, want %+v", got, want)
	}
}
