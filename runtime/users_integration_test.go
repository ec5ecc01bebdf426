//go:build integration

package queuey_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// Tests of issue 15's runtime items: what a new user tripped over.

type usersCtxKey struct{}

// TestIntegrationHandlersSeeTheCallersContextValues pins issue 15: the job
// context was derived from context.Background(), so a value put in the
// context given to NewWorkerPool (for Start) or to Run was nil inside the
// handler, while queueytest.Work passed it through. Neither context's
// cancellation reaches the handler: NewWorkerPool's is cancelled here
// before the job runs, and the job still runs to completion.
func TestIntegrationHandlersSeeTheCallersContextValues(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"Start", "Run"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := wkSetup(t, "ctx-"+strings.ToLower(how))
			set := e.set(queuey.QueueConfig{Name: "jobs", Prefetch: 1})
			type seen struct {
				value any
				err   error
			}
			got := make(chan seen, 1)
			ws := queuey.NewWorkers()
			queuey.AddWorker(ws, queuey.WorkFunc[wkOK](func(ctx context.Context, _ *queuey.Job[wkOK]) error {
				got <- seen{ctx.Value(usersCtxKey{}), ctx.Err()}
				return nil
			}))
			newCtx, cancelNew := context.WithCancel(context.WithValue(context.Background(), usersCtxKey{}, "from NewWorkerPool"))
			pool, err := queuey.NewWorkerPool(newCtx, wkAMQPURL(), set, ws, &queuey.WorkerOptions{Logger: e.logger()})
			if err != nil {
				t.Fatal(err)
			}
			cancelNew() // its values stay; its cancellation must not end jobs
			want := "from NewWorkerPool"
			runDone := make(chan error, 1)
			runCtx, stopRun := context.WithCancel(context.WithValue(context.Background(), usersCtxKey{}, "from Run"))
			defer stopRun()
			if how == "Start" {
				if err := pool.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { _ = pool.Stop(context.Background()) }()
			} else {
				want = "from Run"
				go func() { runDone <- pool.Run(runCtx) }()
			}
			if _, err := queuey.EnqueueJob(context.Background(), e.producer(set), wkOK{}, nil); err != nil {
				t.Fatal(err)
			}
			select {
			case s := <-got:
				if s.value != want || s.err != nil {
					t.Errorf("handler saw value %v and ctx.Err %v; want %q and no error", s.value, s.err, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the job did not run")
			}
			if how == "Run" {
				stopRun()
				if err := <-runDone; err != nil {
					t.Errorf("Run: %v", err)
				}
			}
		})
	}
}

// TestIntegrationOverlongStringsAreRefusedWithoutDisturbingOtherPublishes
// pins issue 15: Enqueue with a 300-byte job type or correlation id made
// amqp091-go refuse the short string by closing the whole connection (three
// times, before the call failed with a bare amqp error), disturbing every
// publish in flight on it. The producer refuses such values before sending,
// with an error naming the field, and the publishes running beside the
// refused ones succeed on the same, still open, connection.
func TestIntegrationOverlongStringsAreRefusedWithoutDisturbingOtherPublishes(t *testing.T) {
	t.Parallel()
	e := wkSetup(t, "shortstr")
	set := e.set(queuey.QueueConfig{Name: "jobs"})
	ac, err := amqp.Dial(wkAMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	closed := ac.NotifyClose(make(chan *amqp.Error, 1))
	p, err := queuey.NewProducerFromConnection(context.Background(), ac, set, &queuey.ProducerOptions{Logger: e.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const goodPublishers, each = 8, 25
	var wg sync.WaitGroup
	goodErrs := make(chan error, goodPublishers*each)
	for range goodPublishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := p.Enqueue(ctx, "jobs", "users.good", map[string]int{"n": 1}, nil); err != nil {
					goodErrs <- err
				}
			}
		}()
	}
	long := strings.Repeat("t", 300)
	refused := map[string]error{}
	var mu sync.Mutex
	for field, call := range map[string]func() error{
		"job type": func() error { _, err := p.Enqueue(ctx, "jobs", long, 1, nil); return err },
		"correlation id": func() error {
			_, err := p.Enqueue(ctx, "jobs", "users.good", 1, &queuey.EnqueueOptions{CorrelationID: long})
			return err
		},
		"job type ": func() error { _, err := p.EnqueueAfter(ctx, "jobs", long, 1, time.Second, nil); return err },
		"job type  ": func() error {
			_, err := p.EnqueueBatch(ctx, []queuey.BatchJob{{Queue: "jobs", JobType: long, Payload: 1}})
			return err
		},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := call()
			mu.Lock()
			refused[field] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(goodErrs)
	for field, err := range refused {
		name := strings.TrimSpace(field)
		if !errors.Is(err, queuey.ErrFieldTooLong) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "255") {
			t.Errorf("%s of 300 bytes: %v; want ErrFieldTooLong naming the %s and the limit", name, err, name)
		}
	}
	for err := range goodErrs {
		t.Errorf("a publish beside the refused ones failed: %v", err)
	}
	select {
	case err := <-closed:
		t.Errorf("the connection was closed: %v", err)
	default:
	}
	if ac.IsClosed() {
		t.Error("the connection is closed")
	}
	if n := e.ready(set.WorkQueue("jobs")); n != goodPublishers*each {
		t.Errorf("%d jobs in the work queue, want the %d good ones and none of the refused", n, goodPublishers*each)
	}
}

// usersLong is a job kind longer than AMQP allows in the type property, as
// another implementation may enqueue it (the original queuey cuts the
// property and keeps the body's job_type whole).
type usersLong struct{ wkArgs }

var usersLongKind = strings.Repeat("é", 150) // 300 bytes

func (usersLong) Kind() string  { return usersLongKind }
func (usersLong) Queue() string { return "jobs" }

// TestIntegrationRetryOfAJobWithAnOverlongTypeCutsTheProperty pins issue 15:
// retrying a job whose envelope job_type is over 255 bytes failed the
// republish (amqp091-go refuses the short string and closes the
// connection), so the delivery went back and the job never got its second
// attempt. The retry cuts the type property to 255 bytes on a UTF-8
// boundary and keeps the job type whole in the body.
func TestIntegrationRetryOfAJobWithAnOverlongTypeCutsTheProperty(t *testing.T) {
	t.Parallel()
	e := wkSetup(t, "longtype")
	set := e.set(queuey.QueueConfig{Name: "jobs", Prefetch: 1})
	work, dead := set.WorkQueue("jobs"), set.DeadQueue("jobs")
	var runs wkRuns
	ws := queuey.NewWorkers()
	queuey.AddWorker(ws, queuey.WorkFunc[usersLong](func(_ context.Context, j *queuey.Job[usersLong]) error {
		runs.add(j.JobContext)
		return errors.New("try again")
	}))
	e.start(set, ws, &queuey.WorkerOptions{Retry: &queuey.RetryPolicy{Strategy: queuey.RetryFixed, MaxAttempts: 2, Base: 100 * time.Millisecond}, RetryGranularity: 100 * time.Millisecond})
	body := []byte(`{"job_id":"6f1c2a0e-8d4b-4f7a-9c3e-2b5d7e9f1a3c","job_type":"` + usersLongKind + `","queue":"` + work + `","attempt":1,"enqueued_at_ms":1700000000000,"deferrals":0,"priority":0,"payload":{"id":1}}`)
	publishWith(t, e, work, amqp.Publishing{Body: body, ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: "6f1c2a0e-8d4b-4f7a-9c3e-2b5d7e9f1a3c", Type: strings.Repeat("é", 127)})
	got := e.waitDead(dead, 1, 15*time.Second)
	if runs.len() != 2 {
		t.Errorf("the handler ran %d times, want 2 (the retry must have been published)", runs.len())
	}
	if d := got[0]; d.Type != strings.Repeat("é", 127) || !strings.Contains(string(d.Body), `"job_type":"`+usersLongKind+`"`) || !strings.Contains(string(d.Body), `"attempt":2`) {
		t.Errorf("dead letter of the retried job: type %d bytes, body %s", len(d.Type), d.Body)
	}
}

// publishWith publishes msg onto queue and waits for its confirm.
func publishWith(t *testing.T, e *wkEnv, queue string, msg amqp.Publishing) {
	t.Helper()
	ch, err := e.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm("", queue, true, false, msg)
	if err != nil || !dc.Wait() {
		t.Fatalf("publish to %s: %v", queue, err)
	}
}

// TestIntegrationNonPositiveDelays pins issue 15 and SPEC §2:
// EnqueueAfter(-5s) and Producer.Defer(-5s) failed with
// topology.ErrInvalidDelay, which no queuey sentinel exports, while
// time.Until of a time just past is an ordinary call and a handler's
// JobDefer(-1s) waits one step. EnqueueAfter with a delay <= 0 enqueues now,
// like Enqueue (an undeclared producer's too); Defer with a delay <= 0
// waits one defer-granularity step and comes back at the queue's max
// priority.
func TestIntegrationNonPositiveDelays(t *testing.T) {
	t.Parallel()
	e := wkSetup(t, "delays")
	set := e.set(queuey.QueueConfig{Name: "jobs"})
	work := set.WorkQueue("jobs")
	p := e.producer(set)
	ctx := context.Background()
	for _, d := range []time.Duration{-5 * time.Second, 0} {
		if _, err := p.EnqueueAfter(ctx, "jobs", "users.now", 1, d, nil); err != nil {
			t.Errorf("EnqueueAfter(%s): %v", d, err)
		}
	}
	up, err := queuey.NewUndeclaredProducer(ctx, wkAMQPURL(), e.prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	if _, err := up.EnqueueAfter(ctx, "jobs", "users.now", 1, time.Until(time.Now().Add(-time.Millisecond)), nil); err != nil {
		t.Errorf("undeclared producer's EnqueueAfter of a time just past: %v", err)
	}
	if n := e.ready(work); n != 3 {
		t.Errorf("%d jobs ready right after EnqueueAfter with delays <= 0, want all 3 enqueued now", n)
	}
	hold := topology.HoldName(work, 1000)
	deferredID, err := p.Defer(ctx, "jobs", "users.later", 1, -5*time.Second, nil)
	if err != nil {
		t.Fatalf("Defer(-5s): %v", err)
	}
	if n := e.ready(hold); n != 1 {
		t.Errorf("hold queue %s holds %d, want the deferred job waiting one 1s step", hold, n)
	}
	wkEventually(t, 10*time.Second, func() bool { return e.ready(work) == 4 }, "the deferred job to come back")
	var found bool
	for _, d := range e.getAll(work) {
		if d.MessageId == deferredID {
			found = true
			if d.Priority != 10 || d.Headers[topology.HeaderDeferrals] != int64(0) {
				t.Errorf("deferred job came back with priority %d and x-deferrals %v; want 10 and 0", d.Priority, d.Headers[topology.HeaderDeferrals])
			}
		}
	}
	if !found {
		t.Error("the deferred job did not come back")
	}
}

// TestIntegrationWorkerDeclaresItsDeletedQueueAgain pins issue 15: the
// original queuey's upgrade procedure is "drain the queue, delete it, let
// the new version declare it", and a Go pool whose queue was deleted waited
// forever for someone else to declare it. With no migration in progress it
// declares the queue again itself after a short wait, and handles what is
// enqueued there; while a migration queue (.migrating) exists, it leaves the
// queue to the migration.
func TestIntegrationWorkerDeclaresItsDeletedQueueAgain(t *testing.T) {
	t.Parallel()
	e := wkSetup(t, "redeclare")
	set := e.set(queuey.QueueConfig{Name: "jobs", Prefetch: 1, MaxPriority: 5})
	work := set.WorkQueue("jobs")
	var runs wkRuns
	ws := recordingWorkers(&runs)
	e.start(set, ws, &queuey.WorkerOptions{})
	exists := func(name string) bool {
		_, err := e.mgmt.GetQueue("/", name)
		return err == nil
	}
	wkEventually(t, 10*time.Second, func() bool {
		q, err := e.mgmt.GetQueue("/", work)
		return err == nil && q.Consumers == 1
	}, "the pool to consume %s", work)

	// A migration in progress: its queue exists, so the pool must wait.
	e.declareMgmt(topology.MigrationName(work))
	if _, err := e.mgmt.DeleteQueue("/", work); err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second)
	if exists(work) {
		t.Fatalf("the pool declared %s while its migration queue existed: that races the migration", work)
	}

	// No migration: the pool declares the queue again, with its arguments.
	if _, err := e.mgmt.DeleteQueue("/", topology.MigrationName(work)); err != nil {
		t.Fatal(err)
	}
	wkEventually(t, 20*time.Second, func() bool { return exists(work) }, "the pool to declare %s again", work)
	q, err := e.mgmt.GetQueue("/", work)
	if err != nil || fmt.Sprint(q.Arguments["x-max-priority"]) != "5" || !q.Durable {
		t.Errorf("declared again as %+v (%v), want durable with x-max-priority 5", q, err)
	}
	if _, err := queuey.EnqueueJob(context.Background(), e.producer(set), wkOK{}, nil); err != nil {
		t.Fatal(err)
	}
	wkEventually(t, 15*time.Second, func() bool { return runs.len() == 1 }, "the job enqueued on the declared queue to run")
	if len(e.log.find("declared it again")) == 0 {
		t.Error("the redeclaration was not logged")
	}
}

// declareMgmt declares a plain durable queue through the management API.
func (e *wkEnv) declareMgmt(name string) {
	e.t.Helper()
	ch, err := e.conn.Channel()
	if err != nil {
		e.t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		e.t.Fatalf("declare %s: %v", name, err)
	}
}

// TestIntegrationJobLogsCarryTheJobsIdentity pins issue 15: every record
// about a job carries its id, kind, queue, attempt and correlation id, and
// a success is logged at Debug, not Info (a busy worker should not write a
// line per success by default); a retry at Warn and a dead letter at Error,
// as before.
func TestIntegrationJobLogsCarryTheJobsIdentity(t *testing.T) {
	t.Parallel()
	e := wkSetup(t, "logs")
	set := e.set(queuey.QueueConfig{Name: "jobs", Prefetch: 4})
	work := set.WorkQueue("jobs")
	ws := queuey.NewWorkers()
	queuey.AddWorker(ws, queuey.WorkFunc[wkOK](func(context.Context, *queuey.Job[wkOK]) error { return nil }))
	queuey.AddWorker(ws, queuey.WorkFunc[wkAlways](func(context.Context, *queuey.Job[wkAlways]) error { return errors.New("still broken") }))
	e.start(set, ws, &queuey.WorkerOptions{Retry: &queuey.RetryPolicy{Strategy: queuey.RetryFixed, MaxAttempts: 2, Base: 100 * time.Millisecond}, RetryGranularity: 100 * time.Millisecond})
	p := e.producer(set)
	okID, err := queuey.EnqueueJob(context.Background(), p, wkOK{}, &queuey.EnqueueOptions{CorrelationID: "req-ok"})
	if err != nil {
		t.Fatal(err)
	}
	failID, err := queuey.EnqueueJob(context.Background(), p, wkAlways{}, &queuey.EnqueueOptions{CorrelationID: "req-fail"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitDead(set.DeadQueue("jobs"), 1, 15*time.Second)
	wkEventually(t, 5*time.Second, func() bool { return len(e.log.find("job dead-lettered")) == 1 }, "the dead letter's record")
	check := func(msg string, level slog.Level, id, kind, corr string, attempt int) {
		t.Helper()
		recs := e.log.find(msg)
		if len(recs) != 1 {
			t.Fatalf("%d records %q, want 1", len(recs), msg)
		}
		r := recs[0]
		if r.level != level || r.attrs["job_id"] != id || r.attrs["job_type"] != kind || r.attrs["queue"] != work ||
			fmt.Sprint(r.attrs["attempt"]) != fmt.Sprint(attempt) || r.attrs["correlation_id"] != corr {
			t.Errorf("record %q: level %s, attrs %v; want level %s, job %s of kind %s on %s, attempt %d, correlation id %s",
				msg, r.level, r.attrs, level, id, kind, work, attempt, corr)
		}
	}
	check("job done", slog.LevelDebug, okID, "wk.ok", "req-ok", 1)
	check("job failed; retrying", slog.LevelWarn, failID, "wk.always-fails", "req-fail", 1)
	check("job dead-lettered", slog.LevelError, failID, "wk.always-fails", "req-fail", 2)
}

// TestIntegrationAMQPURLAtTheManagementPortSaysSo pins issue 15: an amqp://
// URL pointing at the management port failed after 5 s with amqp091-go's
// bare `Exception (501) Reason: "EOF"`.
func TestIntegrationAMQPURLAtTheManagementPortSaysSo(t *testing.T) {
	t.Parallel()
	mgmt := strings.TrimPrefix(brokertest.FromEnv().Endpoint, "http://")
	_, err := queuey.NewUndeclaredProducer(context.Background(), "amqp://guest:guest@"+strings.TrimSuffix(mgmt, "/")+"/", "", nil)
	if err == nil || !strings.Contains(err.Error(), "management port") {
		t.Errorf("amqp:// to the management port: %v; want it to say this looks like the management port", err)
	}
}
