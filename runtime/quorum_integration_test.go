//go:build integration

package queuey_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// The tests of quorum queue sets (QueueConfig.QueueType), on whichever
// broker AMQP_URL names: CI runs them on RabbitMQ 3.10 and on 4.0.

// brokerMajor is the major version of the broker e's connection reached.
func (e *wkEnv) brokerMajor() string {
	v, _ := e.conn.Properties["version"].(string)
	major, _, _ := strings.Cut(v, ".")
	return major
}

func TestIntegrationQuorumSetIsReplicatedAndRuns(t *testing.T) {
	t.Parallel()
	e := wkSetup(t, "quorum")
	set := e.set(queuey.QueueConfig{Name: "jobs", QueueType: queuey.QueueTypeQuorum})
	var runs wkRuns
	ws := recordingWorkers(&runs)
	p := e.producer(set)
	ctx := context.Background()
	const jobs = 20
	for i := range jobs - 1 {
		if _, err := queuey.EnqueueJob(ctx, p, wkOK{wkArgs{ID: i}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.EnqueueAfter(ctx, "jobs", "wk.ok", wkOK{wkArgs{ID: jobs}}, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	work, dead := set.WorkQueue("jobs"), set.DeadQueue("jobs")
	wantArgs := map[string]map[string]any{
		work: {"x-queue-type": "quorum", "x-delivery-limit": float64(topology.WorkDeliveryLimit)},
		dead: {"x-queue-type": "quorum", "x-delivery-limit": float64(topology.UnlimitedDeliveries)},
	}
	for name, want := range wantArgs {
		q, err := e.mgmt.GetQueue("/", name)
		if err != nil {
			t.Fatalf("GetQueue %s: %v", name, err)
		}
		if q.Type != "quorum" || !q.Durable {
			t.Errorf("%s: type %q durable %t, want a durable quorum queue", name, q.Type, q.Durable)
		}
		if len(q.Arguments) != len(want) {
			t.Errorf("%s: arguments %v, want %v", name, q.Arguments, want)
		}
		for k, v := range want {
			if q.Arguments[k] != v {
				t.Errorf("%s: argument %s = %v (%T), want %v", name, k, q.Arguments[k], q.Arguments[k], v)
			}
		}
	}
	hold := topology.HoldName(work, 1000)
	if q, err := e.mgmt.GetQueue("/", hold); err != nil || q.Type != "classic" {
		t.Errorf("hold queue %s: %+v, %v; want a classic queue (a quorum queue's x-expires is not renewed by a redeclare)", hold, q, err)
	}
	e.start(set, ws, &queuey.WorkerOptions{})
	wkEventually(t, 20*time.Second, func() bool { return runs.len() == jobs }, "all %d jobs to run (ran %d)", jobs, runs.len)
}

// A job a quorum queue redelivered so often that one more return would make
// the broker drop it is dead-lettered, with queuey's headers, and not run.
// Before, it was retried through a hold queue like any redelivery whose
// worker died, and ran.
func TestIntegrationQuorumDeliveryLimitDeadLettersUnrun(t *testing.T) {
	t.Parallel()
	e := wkSetup(t, "qlimit")
	set := e.set(queuey.QueueConfig{Name: "jobs", QueueType: queuey.QueueTypeQuorum})
	p := e.producer(set)
	ctx := context.Background()
	id, err := queuey.EnqueueJob(ctx, p, wkOK{wkArgs{ID: 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	work, dead := set.WorkQueue("jobs"), set.DeadQueue("jobs")
	// Give it back unsettled until its delivery count is one short of the
	// limit: the broker would drop it after one more return.
	ch, err := e.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	returns := topology.WorkDeliveryLimit - 1
	for i := 0; i < returns; i++ {
		var d amqp.Delivery
		var ok bool
		wkEventually(t, 5*time.Second, func() bool {
			d, ok, err = ch.Get(work, false)
			return err != nil || ok
		}, "delivery %d", i)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	var runs wkRuns
	ws := recordingWorkers(&runs)
	e.start(set, ws, &queuey.WorkerOptions{Retry: &queuey.RetryPolicy{MaxAttempts: 25, Base: 10 * time.Millisecond, Max: 10 * time.Millisecond}})
	got := e.waitDead(dead, 1, 15*time.Second)
	reason, _ := got[0].Headers[topology.HeaderDeathReason].(string)
	if !strings.HasPrefix(reason, queuey.ReasonDeliveryLimit) || got[0].MessageId != id {
		t.Errorf("dead letter %s with reason %q, want job %s with a reason starting %q", got[0].MessageId, reason, id, queuey.ReasonDeliveryLimit)
	}
	if q, _ := got[0].Headers[topology.HeaderOriginalQueue].(string); q != work {
		t.Errorf("dead letter's %s = %q, want %q", topology.HeaderOriginalQueue, q, work)
	}
	// Time for a retry through a hold queue to come back and run.
	time.Sleep(2 * time.Second)
	if n := runs.len(); n != 0 {
		t.Errorf("the job ran %d times; a job at its delivery limit must be dead-lettered unrun", n)
	}
	if n := e.ready(work); n != 0 {
		t.Errorf("%s still holds %d messages", work, n)
	}
	t.Logf("dead-lettered after %d returns: %s", returns, reason)
}

// Reading the dead letters gives each back with a requeue, which a quorum
// queue counts as a delivery: with RabbitMQ 4's default limit of 20 a dead
// letter read 21 times would be dropped. queuey's quorum dead-letter queues
// have no limit in effect (topology.UnlimitedDeliveries).
func TestIntegrationQuorumDeadLettersSurviveManyReads(t *testing.T) {
	t.Parallel()
	e := wkSetup(t, "qreads")
	set := e.set(queuey.QueueConfig{Name: "jobs", QueueType: queuey.QueueTypeQuorum})
	ws := queuey.NewWorkers()
	queuey.AddWorker(ws, queuey.WorkFunc[wkOK](func(context.Context, *queuey.Job[wkOK]) error {
		return queuey.JobFatal(errors.New("refused"))
	}))
	p := e.producer(set)
	ctx := context.Background()
	if _, err := queuey.EnqueueJob(ctx, p, wkOK{wkArgs{ID: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	e.start(set, ws, &queuey.WorkerOptions{})
	dead := set.DeadQueue("jobs")
	wkEventually(t, 15*time.Second, func() bool { return e.ready(dead) == 1 }, "the dead letter")
	dl, err := queuey.OpenDeadLetters(ctx, wkAMQPURL(), set)
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	const reads = 2*topology.WorkDeliveryLimit + 5
	for i := range reads {
		page, err := dl.List(ctx, "jobs", queuey.ListOptions{})
		if err != nil {
			t.Fatalf("read %d: %v", i+1, err)
		}
		if len(page.Letters) != 1 {
			t.Fatalf("read %d found %d dead letters, want 1: a read's requeue must not count the dead letter towards a limit", i+1, len(page.Letters))
		}
	}
}

// What "ahead of the backlog" means for a deferral on a quorum queue: on
// RabbitMQ 4 the deferred job is high priority (5), which a quorum queue
// serves two for one normal delivery; 3.x quorum queues have no priorities,
// so it waits behind the backlog.
func TestIntegrationQuorumDeferral(t *testing.T) {
	t.Parallel()
	e := wkSetup(t, "qdefer")
	set := e.set(queuey.QueueConfig{Name: "jobs", Prefetch: 1, QueueType: queuey.QueueTypeQuorum})
	var mu sync.Mutex
	done, doneAtReturn := 0, -1
	var deferrer wkRuns
	ws := queuey.NewWorkers()
	queuey.AddWorker(ws, queuey.WorkFunc[wkDeferrer](func(_ context.Context, j *queuey.Job[wkDeferrer]) error {
		deferrer.add(j.JobContext)
		if j.Deferrals == 0 {
			return queuey.JobDefer(time.Second, "later")
		}
		mu.Lock()
		doneAtReturn = done
		mu.Unlock()
		return nil
	}))
	queuey.AddWorker(ws, queuey.WorkFunc[wkOK](func(context.Context, *queuey.Job[wkOK]) error {
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		done++
		mu.Unlock()
		return nil
	}))
	p := e.producer(set)
	ctx := context.Background()
	if _, err := queuey.EnqueueJob(ctx, p, wkDeferrer{wkArgs{ID: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	const backlog = 60 // about 3 s of work
	for i := range backlog {
		if _, err := queuey.EnqueueJob(ctx, p, wkOK{wkArgs{ID: i}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.start(set, ws, &queuey.WorkerOptions{Concurrency: 1})
	wkEventually(t, 20*time.Second, func() bool { return deferrer.len() >= 2 }, "the deferred job to come back")
	jobs, _ := deferrer.snapshot()
	if jobs[1].Priority != topology.QuorumHighPriority {
		t.Errorf("the deferred job came back with priority %d, want %d", jobs[1].Priority, topology.QuorumHighPriority)
	}
	mu.Lock()
	ahead := doneAtReturn
	mu.Unlock()
	switch e.brokerMajor() {
	case "3":
		if ahead != backlog {
			t.Errorf("on RabbitMQ 3.x the deferred job ran with %d of %d backlog jobs done, want after all of them (its quorum queues have no priorities)", ahead, backlog)
		}
	default:
		if ahead >= backlog {
			t.Errorf("the deferred job ran after the whole backlog (%d of %d done), want ahead of it", ahead, backlog)
		}
	}
	t.Logf("RabbitMQ %s: the deferred job ran with %d of %d backlog jobs done", e.brokerMajor(), ahead, backlog)
}
