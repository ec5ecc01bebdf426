package queueytest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/queueytest"
)

type sendArgs struct {
	To      string `json:"to"`
	Mode    string `json:"mode"`
	private string // does not survive JSON, as it would not through the broker
}

func (sendArgs) Kind() string  { return "test.send" }
func (sendArgs) Queue() string { return "mail" }

type receiptArgs struct {
	To string `json:"to"`
}

func (receiptArgs) Kind() string  { return "test.receipt" }
func (receiptArgs) Queue() string { return "mail" }

type ptrArgs struct{ N int }

func (*ptrArgs) Kind() string  { return "test.ptr" }
func (*ptrArgs) Queue() string { return "other" }

// sendWorker's behaviour is picked by Mode.
type sendWorker struct {
	producer queuey.Enqueuer
	seen     *queuey.Job[sendArgs]
}

func (w *sendWorker) Work(ctx context.Context, j *queuey.Job[sendArgs]) error {
	w.seen = j
	switch j.Args.Mode {
	case "ok":
		_, err := queuey.EnqueueJob(ctx, w.producer, receiptArgs{To: j.Args.To}, &queuey.EnqueueOptions{CorrelationID: j.ID})
		return err
	case "flaky":
		return errors.New("smtp: 421 try again")
	case "ratelimited":
		return queuey.JobDefer(30*time.Second, "Retry-After: 30")
	case "bounce":
		return queuey.JobFatal(errors.New("550 no such user"))
	case "panic":
		panic("boom")
	case "slow":
		<-ctx.Done()
		return ctx.Err()
	case "private":
		if j.Args.private != "" {
			return errors.New("a field that does not survive JSON reached the handler")
		}
		return nil
	}
	return errors.New("unknown mode")
}

type testBundle struct {
	producer *queueytest.Producer
	handler  *sendWorker
	worker   *queueytest.Worker[sendArgs]
}

func setup(t *testing.T, opts *queuey.WorkerOptions) *testBundle {
	t.Helper()
	p := queueytest.NewProducer()
	h := &sendWorker{producer: p}
	return &testBundle{producer: p, handler: h, worker: queueytest.MustNewWorker[sendArgs](t, h, opts)}
}

func TestWorkerAckAndEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	r := b.worker.Work(context.Background(), sendArgs{To: "a@example.com", Mode: "ok"}, &queueytest.JobOptions{CorrelationID: "req-9", ID: "job-1"})
	queueytest.RequireAcked(t, r)
	if r.String() != "acked" {
		t.Errorf("String() = %q", r.String())
	}
	receipt := queueytest.RequireEnqueued[receiptArgs](t, b.producer)
	if receipt.To != "a@example.com" {
		t.Errorf("receipt %+v", receipt)
	}
	jobs := b.producer.Jobs()
	if len(jobs) != 1 || jobs[0].CorrelationID != "job-1" || jobs[0].Queue != "mail" || jobs[0].JobType != "test.receipt" || jobs[0].Delay != 0 || jobs[0].ID == "" {
		t.Errorf("recorded %+v", jobs)
	}
	queueytest.RequireNotEnqueued[sendArgs](t, b.producer)
	jc := b.handler.seen.JobContext
	if jc.ID != "job-1" || jc.CorrelationID != "req-9" || jc.Attempt != 1 || jc.MaxAttempts != queuey.DefaultMaxAttempts || jc.Queue != "mail" || jc.Type != "test.send" || jc.Age() > time.Minute {
		t.Errorf("job context %+v", jc)
	}
}

func TestWorkerRetryUsesTheResolvedPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, &queuey.WorkerOptions{
		Retry:       &queuey.RetryPolicy{MaxAttempts: 9},
		RetryByKind: map[string]queuey.RetryPolicy{"test.send": queuey.FixedRetry(3, 10*time.Second)},
	})
	r := b.worker.Work(context.Background(), sendArgs{Mode: "flaky"}, &queueytest.JobOptions{Attempt: 2})
	if ttl := queueytest.RequireRetried(t, r); ttl != 10*time.Second {
		t.Errorf("retry after %s, want the fixed 10s", ttl)
	}
	if r.Job.MaxAttempts != 3 || r.Job.IsLastAttempt() || !strings.Contains(r.String(), "attempt 2 of 3 failed: smtp: 421 try again") {
		t.Errorf("result %s", r)
	}
	r = b.worker.Work(context.Background(), sendArgs{Mode: "flaky"}, &queueytest.JobOptions{Attempt: 3})
	if reason := queueytest.RequireDeadLettered(t, r); reason != "max attempts (3) exhausted after attempt 3: smtp: 421 try again" {
		t.Errorf("reason %q", reason)
	}
}

func TestWorkerRetryDelayIsJitteredWithinTheBound(t *testing.T) {
	t.Parallel()
	b := setup(t, &queuey.WorkerOptions{Retry: &queuey.RetryPolicy{Base: time.Second, Max: time.Minute}, RetryGranularity: 100 * time.Millisecond})
	for attempt := 1; attempt <= 5; attempt++ {
		r := b.worker.Work(context.Background(), sendArgs{Mode: "flaky"}, &queueytest.JobOptions{Attempt: attempt})
		ttl := queueytest.RequireRetried(t, r)
		bound := r.Policy.Backoff(attempt)
		if r.Delay < 0 || r.Delay > bound || ttl < 100*time.Millisecond || ttl > bound+100*time.Millisecond || ttl%(100*time.Millisecond) != 0 {
			t.Errorf("attempt %d: delay %s, hold TTL %s, bound %s", attempt, r.Delay, ttl, bound)
		}
	}
}

func TestWorkerDefer(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	r := b.worker.Work(context.Background(), sendArgs{Mode: "ratelimited"}, &queueytest.JobOptions{Attempt: 4, Deferrals: 2})
	ttl, reason := queueytest.RequireDeferred(t, r)
	if ttl != 30*time.Second || reason != "Retry-After: 30" || r.Job.Attempt != 4 || r.Job.Deferrals != 2 {
		t.Errorf("deferral %s", r)
	}
}

func TestWorkerFatalPanicAndTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, &queuey.WorkerOptions{JobTimeout: 20 * time.Millisecond})
	r := b.worker.Work(context.Background(), sendArgs{Mode: "bounce"}, nil)
	if reason := queueytest.RequireDeadLettered(t, r); reason != "fatal error: 550 no such user" || !errors.Is(r.Err, queuey.ErrJobFatal) {
		t.Errorf("fatal: %s", r)
	}
	r = b.worker.Work(context.Background(), sendArgs{Mode: "panic"}, nil)
	queueytest.RequireRetried(t, r)
	if !errors.Is(r.Err, queuey.ErrJobPanicked) {
		t.Errorf("panic: %v", r.Err)
	}
	r = b.worker.Work(context.Background(), sendArgs{Mode: "slow"}, nil)
	queueytest.RequireRetried(t, r)
	if !errors.Is(r.Err, queuey.ErrJobTimedOut) {
		t.Errorf("timeout: %v", r.Err)
	}
}

func TestWorkerArgsGoThroughJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	queueytest.RequireAcked(t, b.worker.Work(context.Background(), sendArgs{Mode: "private", private: "lost"}, nil))
}

func TestWorkerBodies(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	r := b.worker.WorkBody(context.Background(), "mail", []byte("not json"))
	if reason := queueytest.RequireDeadLettered(t, r); reason != queuey.ReasonMalformedEnvelope {
		t.Errorf("malformed: %q", reason)
	}
	r = b.worker.WorkBody(context.Background(), "mail", []byte(`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"nobody","queue":"mail","attempt":1,"enqueued_at_ms":1,"payload":{}}`))
	if reason := queueytest.RequireDeadLettered(t, r); reason != queuey.ReasonUnknownJobType+" `nobody`" {
		t.Errorf("unknown: %q", reason)
	}
}

func TestNewWorkerRefusesWhatAPoolRefuses(t *testing.T) {
	t.Parallel()
	h := &sendWorker{}
	if _, err := queueytest.NewWorker[sendArgs](h, &queuey.WorkerOptions{Retry: &queuey.RetryPolicy{Factor: 0.5}}); err == nil {
		t.Error("a shrinking retry policy was accepted")
	}
	if _, err := queueytest.NewWorker[sendArgs](h, &queuey.WorkerOptions{RetryByKind: map[string]queuey.RetryPolicy{"test.sned": {}}}); err == nil {
		t.Error("an override for a kind nobody handles was accepted")
	}
}

func TestNewJob(t *testing.T) {
	t.Parallel()
	j := queueytest.NewJob(sendArgs{To: "x"}, queuey.JobContext{Attempt: 3, MaxAttempts: 3})
	if j.Type != "test.send" || j.Queue != "mail" || j.ID == "" || !j.IsLastAttempt() || j.Args.To != "x" || j.Age() > time.Minute {
		t.Errorf("job %+v", j)
	}
	// A handler can be called directly with it.
	h := &sendWorker{producer: queueytest.NewProducer()}
	if err := h.Work(context.Background(), queueytest.NewJob(sendArgs{Mode: "ok"}, queuey.JobContext{})); err != nil {
		t.Fatal(err)
	}
}

func TestProducer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := queueytest.NewProducer()
	if _, err := queuey.EnqueueJobAfter(ctx, p, receiptArgs{To: "a"}, 5*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := queuey.DeferJob(ctx, p, receiptArgs{To: "b"}, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := queuey.EnqueueJob(ctx, p, &ptrArgs{N: 4}, nil); err != nil {
		t.Fatal(err)
	}
	got := queueytest.EnqueuedArgs[receiptArgs](t, p)
	if len(got) != 2 || got[0].To != "a" || got[1].To != "b" {
		t.Errorf("receipts %+v", got)
	}
	jobs := p.Jobs()
	if jobs[0].Delay != 5*time.Second || jobs[0].Deferred || jobs[1].Delay != time.Minute || !jobs[1].Deferred {
		t.Errorf("delays %+v", jobs)
	}
	if n := queueytest.RequireEnqueued[*ptrArgs](t, p); n.N != 4 {
		t.Errorf("pointer args %+v", n)
	}
	p.Reset()
	if len(p.Jobs()) != 0 {
		t.Error("Reset kept jobs")
	}
	p.Err = errors.New("broker unavailable")
	if _, err := queuey.EnqueueJob(ctx, p, receiptArgs{}, nil); err == nil || len(p.Jobs()) != 0 {
		t.Errorf("injected error: %v, %d jobs", err, len(p.Jobs()))
	}
	p.Err = nil
	if _, err := p.Enqueue(ctx, "mail", "", nil, nil); err == nil {
		t.Error("an empty job type was accepted")
	}
	if _, err := p.Enqueue(ctx, "mail", "x", func() {}, nil); err == nil {
		t.Error("a payload that does not encode was accepted")
	}
}

// Regression: the recording producer accepted a 30-day delay that the real
// producer refuses, so a unit test passed for code that fails against a
// broker.
func TestProducerRefusesWhatTheRealProducerRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := queueytest.NewProducer()
	month := 30 * 24 * time.Hour
	if _, err := queuey.EnqueueJobAfter(ctx, p, receiptArgs{To: "a"}, month, nil); !errors.Is(err, queuey.ErrDelayTooLong) {
		t.Errorf("EnqueueAfter 30d: %v, want ErrDelayTooLong", err)
	}
	if _, err := queuey.DeferJob(ctx, p, receiptArgs{To: "b"}, month, nil); !errors.Is(err, queuey.ErrDelayTooLong) {
		t.Errorf("Defer 30d: %v, want ErrDelayTooLong", err)
	}
	if _, err := queuey.DeferJob(ctx, p, receiptArgs{To: "c"}, -time.Second, nil); err == nil {
		t.Error("a negative delay was accepted")
	}
	if n := len(p.Jobs()); n != 0 {
		t.Errorf("%d refused jobs were recorded", n)
	}
	// The longest delay a hold queue carries is still fine.
	if _, err := queuey.EnqueueJobAfter(ctx, p, receiptArgs{To: "d"}, 24*24*time.Hour, nil); err != nil {
		t.Errorf("EnqueueAfter 24d: %v", err)
	}
}
