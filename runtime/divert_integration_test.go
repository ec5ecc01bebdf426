//go:build integration

package queuey

// Diversion against a real broker: while a work queue's divert queue exists,
// a declared producer publishes what it would publish to the work queue into
// the migration queue (topology.DivertName states the protocol).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// divertBundle is a declared producer of one work queue "jobs" (and
// "other", never diverted) with the test's broker and a channel to look
// with.
type divertBundle struct {
	b         *testBroker
	p         *Producer
	ch        *amqp.Channel
	work      string
	migration string
	divert    string
	other     string
}

func setupDivert(t *testing.T, opts *ProducerOptions) *divertBundle {
	t.Helper()
	return setupStalledDivert(t, opts, &stalls{})
}

// setupStalledDivert is setupDivert with a producer stalled by st.
func setupStalledDivert(t *testing.T, opts *ProducerOptions, st *stalls) *divertBundle {
	t.Helper()
	b := newTestBroker(t)
	p := newStalledProducer(t, b, []QueueConfig{{Name: "jobs", MaxPriority: NoPriority}, {Name: "other", MaxPriority: NoPriority}}, opts, st)
	work := b.name("jobs")
	return &divertBundle{b: b, p: p, ch: b.channel(), work: work, migration: topology.MigrationName(work), divert: topology.DivertName(work), other: b.name("other")}
}

// startMigration declares what a migration declares before it deletes the
// work queue: the migration queue, then the divert queue.
func (e *divertBundle) startMigration(withMigrationQueue bool) {
	if withMigrationQueue {
		e.b.declare(e.migration, true, topology.MigrationArgs(""))
	}
	e.b.declare(e.divert, topology.DivertDurable, topology.DivertArgs())
}

func (e *divertBundle) counts(t *testing.T, queues ...string) []int {
	t.Helper()
	n := make([]int, len(queues))
	for i, q := range queues {
		n[i] = e.b.count(e.ch, q)
	}
	return n
}

func TestIntegrationDivertedEnqueuesGoToTheMigrationQueue(t *testing.T) {
	t.Parallel()
	e := setupDivert(t, nil)
	ctx := testCtx(t)
	e.startMigration(true)

	id, err := e.p.Enqueue(ctx, "jobs", "k", 1, nil)
	if err != nil {
		t.Fatalf("Enqueue while diverted: %v", err)
	}
	// A batch mixes a diverted queue and one that is not.
	if _, err := e.p.EnqueueBatch(ctx, []BatchJob{
		{Queue: "jobs", JobType: "k", Payload: 2},
		{Queue: "other", JobType: "k", Payload: 3},
		{Queue: "jobs", JobType: "k", Payload: 4},
	}); err != nil {
		t.Fatalf("EnqueueBatch while diverted: %v", err)
	}
	if got := e.counts(t, e.work, e.migration, e.other); got[0] != 0 || got[1] != 3 || got[2] != 1 {
		t.Fatalf("work, migration, other queue hold %v, want [0 3 1]", got)
	}
	if d, ok := e.b.get(e.ch, e.migration); !ok || d.MessageId != id {
		t.Errorf("first job in %s: %q, %v; want %s", e.migration, d.MessageId, ok, id)
	}

	// The migration is over: the divert queue goes, and once the last
	// probe is older than DivertRecheck, jobs go to the work queue again.
	if _, err := e.ch.QueueDelete(e.divert, false, false, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(divert.Recheck + 50*time.Millisecond)
	if _, err := e.p.Enqueue(ctx, "jobs", "k", 5, nil); err != nil {
		t.Fatalf("Enqueue after the migration: %v", err)
	}
	if _, err := e.p.EnqueueBatch(ctx, []BatchJob{{Queue: "jobs", JobType: "k", Payload: 6}}); err != nil {
		t.Fatalf("EnqueueBatch after the migration: %v", err)
	}
	if got := e.counts(t, e.work, e.migration); got[0] != 2 || got[1] != 2 {
		t.Errorf("work, migration queue hold %v after the divert queue went, want [2 2]", got)
	}
}

// A probe's result serves every publish to its queue for DivertRecheck
// from when the probe was sent, and publishes that need a result at the same
// time share one probe.
func TestIntegrationDivertProbesAreCached(t *testing.T) {
	t.Parallel()
	e := setupDivert(t, nil)
	ctx := testCtx(t)
	e.startMigration(true)

	// maxProbes is how many probes n publishes that took elapsed may
	// need: one per DivertRecheck begun. Probing on every publish (or
	// every concurrent publish) needs n.
	maxProbes := func(elapsed time.Duration) int64 { return 1 + int64(elapsed/divert.Recheck) }
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.p.Enqueue(ctx, "jobs", "k", i, nil)
		}()
	}
	wg.Wait()
	concurrent := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got, most := e.p.probesSent.Load(), maxProbes(concurrent); got < 1 || got > most {
		t.Errorf("%d concurrent enqueues in %v sent %d probes, want 1 to %d", n, concurrent, got, most)
	}

	time.Sleep(divert.Recheck + 50*time.Millisecond)
	before := e.p.probesSent.Load()
	start = time.Now()
	for i := range n {
		if _, err := e.p.Enqueue(ctx, "jobs", "k", i, nil); err != nil {
			t.Fatal(err)
		}
	}
	sequential := time.Since(start)
	if got, most := e.p.probesSent.Load()-before, maxProbes(sequential); got < 1 || got > most {
		t.Errorf("%d enqueues one after another in %v sent %d probes, want 1 to %d", n, sequential, got, most)
	}
	t.Logf("%d concurrent enqueues took %v, %d sequential ones %v", n, concurrent, n, sequential)
	if got := e.counts(t, e.work, e.migration); got[0] != 0 || got[1] != 2*n {
		t.Errorf("work, migration queue hold %v, want [0 %d]", got, 2*n)
	}
}

// Regression guard for a migration queue deleted by hand while the divert
// queue exists: a diverted job would be returned as unroutable; it goes to
// the work queue instead.
func TestIntegrationDivertedWithoutMigrationQueueLandsInTheWorkQueue(t *testing.T) {
	t.Parallel()
	e := setupDivert(t, &ProducerOptions{UnroutableRetry: -1})
	ctx := testCtx(t)
	e.startMigration(false)

	if _, err := e.p.Enqueue(ctx, "jobs", "k", 1, nil); err != nil {
		t.Fatalf("Enqueue, diverted to a missing migration queue: %v", err)
	}
	if _, err := e.p.EnqueueBatch(ctx, []BatchJob{{Queue: "jobs", JobType: "k", Payload: 2}, {Queue: "jobs", JobType: "k", Payload: 3}}); err != nil {
		t.Fatalf("EnqueueBatch, diverted to a missing migration queue: %v", err)
	}
	if n := e.b.count(e.ch, e.work); n != 3 {
		t.Errorf("%s holds %d jobs, want 3", e.work, n)
	}
	if e.p.probesSent.Load() == 0 {
		t.Error("no probe was sent: the jobs were never diverted")
	}

	// With the work queue gone too, the error names the queue asked for.
	if _, err := e.ch.QueueDelete(e.work, false, false, false); err != nil {
		t.Fatal(err)
	}
	_, err := e.p.Enqueue(ctx, "jobs", "k", 4, nil)
	if !errors.Is(err, ErrUnroutable) || !strings.Contains(err.Error(), `publish to "`+e.work+`"`) {
		t.Errorf("Enqueue with neither queue = %v, want ErrUnroutable naming %s", err, e.work)
	}
}

// A diverted publish that fails says where it was diverted to.
func TestIntegrationDivertedErrorNamesBothQueues(t *testing.T) {
	t.Parallel()
	e := setupDivert(t, nil)
	ctx := testCtx(t)
	// A migration queue that refuses every message, as the divert queue
	// does.
	e.b.declare(e.migration, true, topology.DivertArgs())
	e.b.declare(e.divert, topology.DivertDurable, topology.DivertArgs())

	_, err := e.p.Enqueue(ctx, "jobs", "k", 1, nil)
	want := `publish to "` + e.work + `" (diverted to "` + e.migration + `" while it is migrated)`
	if !errors.Is(err, ErrNacked) || !strings.Contains(err.Error(), want) {
		t.Errorf("Enqueue into a refusing migration queue = %v, want ErrNacked with %q", err, want)
	}
}

// Hold queues are the producer's own and never migrated: held publishes go
// where they always went, without a probe. Dead-letter queues are migrated
// when their arguments drifted: dead letters follow the protocol like jobs
// (until this changed, they were not probed either, and raced the dead
// queue's deletion).
func TestIntegrationHeldPublishesAreNotProbedAndDeadLettersAre(t *testing.T) {
	t.Parallel()
	e := setupDivert(t, &ProducerOptions{DelayGranularity: 100 * time.Millisecond, DeferGranularity: 100 * time.Millisecond})
	ctx := testCtx(t)
	e.startMigration(true)

	if _, err := e.p.EnqueueAfter(ctx, "jobs", "k", 1, 100*time.Millisecond, nil); err != nil {
		t.Fatalf("EnqueueAfter while diverted: %v", err)
	}
	if _, err := e.p.Defer(ctx, "jobs", "k", 2, 100*time.Millisecond, nil); err != nil {
		t.Fatalf("Defer while diverted: %v", err)
	}
	if got := e.p.probesSent.Load(); got != 0 {
		t.Errorf("held publishes sent %d probes, want 0", got)
	}
	dead := topology.DeadName(e.work)
	if err := e.p.publishRaw(ctx, dead, amqp.Publishing{MessageId: "dead-1", Body: []byte("{}")}); err != nil {
		t.Fatalf("dead letter while the work queue is diverted: %v", err)
	}
	if got := e.p.probesSent.Load(); got != 1 {
		t.Errorf("a dead letter sent %d probes, want 1, of its own queue's divert queue", got)
	}
	// The dead-letter queue's own migration diverts its dead letters.
	deadMigration := topology.MigrationName(dead)
	e.b.declare(deadMigration, true, topology.MigrationArgs(""))
	e.b.declare(topology.DivertName(dead), topology.DivertDurable, topology.DivertArgs())
	time.Sleep(divert.Recheck + 50*time.Millisecond)
	if err := e.p.publishRaw(ctx, dead, amqp.Publishing{MessageId: "dead-2", Body: []byte("{}")}); err != nil {
		t.Fatalf("dead letter while its queue is diverted: %v", err)
	}
	// The hold queue returns both jobs to the work queue by name; the
	// broker does that, and no producer diverts it.
	eventually(t, 10*time.Second, 20*time.Millisecond, "the held jobs never left their hold queue", func() bool {
		return e.b.count(e.ch, e.work) == 2
	})
	if got := e.counts(t, e.migration, dead, deadMigration); got[0] != 0 || got[1] != 1 || got[2] != 1 {
		t.Errorf("migration, dead-letter, dead-letter migration queue hold %v, want [0 1 1]", got)
	}
}

// An undeclared producer does not know which queues are work queues, and
// never probes.
func TestIntegrationUndeclaredProducerDoesNotProbe(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	ctx := testCtx(t)
	work := b.name("jobs")
	b.declare(work, true, map[string]any{})
	b.declare(topology.MigrationName(work), true, topology.MigrationArgs(""))
	b.declare(topology.DivertName(work), topology.DivertDurable, topology.DivertArgs())
	p, err := NewUndeclaredProducer(ctx, b.url, b.prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()

	if _, err := p.Enqueue(ctx, "jobs", "k", 1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p.EnqueueBatch(ctx, []BatchJob{{Queue: "jobs", JobType: "k", Payload: 2}}); err != nil {
		t.Fatal(err)
	}
	if got := p.probesSent.Load(); got != 0 {
		t.Errorf("an undeclared producer sent %d probes, want 0", got)
	}
	ch := b.channel()
	if n := b.count(ch, work); n != 2 {
		t.Errorf("%s holds %d jobs, want 2", work, n)
	}
}

// Probing shares the publish pool: with one channel, a publish that holds
// it must not wait for another to probe.
func TestIntegrationDivertWithOneChannel(t *testing.T) {
	t.Parallel()
	e := setupDivert(t, &ProducerOptions{Channels: 1})
	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer cancel()
	e.startMigration(true)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.p.Enqueue(ctx, "jobs", "k", i, nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := e.b.count(e.ch, e.migration); n != len(errs) {
		t.Errorf("%s holds %d jobs, want %d", e.migration, n, len(errs))
	}
}

// A job confirmed DivertGrace or more after the probe it was routed by was
// sent may have reached the work queue while a migration deleted it (the
// broker confirms such a job and drops it): it is sent again, routed anew.
// Here the producer stalls past divert.Grace between routing the jobs of a
// batch and writing them, as a long write, a GC pause or the broker's flow
// control would make it. Every job of the batch was routed
// by a probe ("other" too, never diverted), and every one is sent again.
func TestIntegrationJobConfirmedAGraceAfterItsProbeIsSentAgain(t *testing.T) {
	t.Parallel()
	for _, diverted := range []bool{false, true} {
		t.Run(fmt.Sprintf("diverted=%v", diverted), func(t *testing.T) {
			t.Parallel()
			st := &stalls{}
			e := setupStalledDivert(t, nil, st)
			ctx := testCtx(t)
			if diverted {
				e.startMigration(true)
			}
			var stalled atomic.Int32
			st.beforeSend = func() {
				if stalled.Add(1) == 1 {
					time.Sleep(divert.Grace + 100*time.Millisecond)
				}
			}
			ids, err := e.p.EnqueueBatch(ctx, []BatchJob{
				{Queue: "jobs", JobType: "k", Payload: 1},
				{Queue: "other", JobType: "k", Payload: 2},
				{Queue: "jobs", JobType: "k", Payload: 3},
			})
			if err != nil {
				t.Fatalf("EnqueueBatch with a stall after the writes: %v", err)
			}
			if n := e.p.lateConfirms.Load(); n != 3 {
				t.Errorf("%d late confirms, want 3", n)
			}
			into := e.work
			if diverted {
				into = e.migration
			}
			got := map[string]int{}
			for {
				d, ok := e.b.get(e.ch, into)
				if !ok {
					break
				}
				got[d.MessageId]++
			}
			if len(got) != 2 || got[ids[0]] != 2 || got[ids[2]] != 2 {
				t.Errorf("%s holds %v by job id, want 2 copies each of %s and %s", into, got, ids[0], ids[2])
			}
			if n := e.b.count(e.ch, e.other); n != 2 {
				t.Errorf("%s holds %d jobs, want 2 copies of %s", e.other, n, ids[1])
			}
		})
	}
}

// A job confirmed late on every try is not reported enqueued: the error
// says it may or may not have been, and each try's copy is in the queue.
func TestIntegrationJobConfirmedLateOnEveryTryFailsSayingItMayBeEnqueued(t *testing.T) {
	t.Parallel()
	st := &stalls{}
	e := setupStalledDivert(t, nil, st)
	ctx := testCtx(t)
	st.beforeSend = func() { time.Sleep(divert.Grace + 50*time.Millisecond) }
	_, err := e.p.Enqueue(ctx, "jobs", "k", 1, nil)
	if err == nil || !strings.Contains(err.Error(), "may or may not have been enqueued") || !strings.Contains(err.Error(), e.work) {
		t.Fatalf("Enqueue confirmed late every time = %v, want an error saying the job may or may not have been enqueued into %s", err, e.work)
	}
	if n := e.b.count(e.ch, e.work); n != maxPublishTries {
		t.Errorf("%s holds %d copies, want one per try: %d", e.work, n, maxPublishTries)
	}
}

// A broker slow to confirm (here every probe's answer is read 300 ms after
// it was sent, past DivertRecheck) does not make every publish fail: a
// publish goes on a result it waited for while that is younger than
// DivertUsable, and its confirm, within DivertGrace of the probe, counts.
// Answers later than DivertUsable fail the publish, which sends nothing.
func TestIntegrationPublishesGoOnWhileProbesAreAnsweredLate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		delay time.Duration
		ok    bool
	}{{300 * time.Millisecond, true}, {divert.Usable + 100*time.Millisecond, false}} {
		t.Run(tc.delay.String(), func(t *testing.T) {
			t.Parallel()
			st := &stalls{}
			e := setupStalledDivert(t, nil, st)
			ctx := testCtx(t)
			st.afterProbe = func() { time.Sleep(tc.delay) }
			const n = 3
			for i := range n {
				_, err := e.p.Enqueue(ctx, "jobs", "k", i, nil)
				switch {
				case tc.ok && err != nil:
					t.Fatalf("Enqueue %d with probes answered after %v: %v", i, tc.delay, err)
				case !tc.ok && (err == nil || !strings.Contains(err.Error(), "too late to trust")):
					t.Fatalf("Enqueue %d with probes answered after %v = %v, want an error saying they came too late to trust", i, tc.delay, err)
				}
			}
			want := 0
			if tc.ok {
				want = n
			}
			if got := e.b.count(e.ch, e.work); got != want {
				t.Errorf("%s holds %d jobs, want %d", e.work, got, want)
			}
			if l := e.p.lateConfirms.Load(); l != 0 {
				t.Errorf("%d late confirms, want 0", l)
			}
		})
	}
}

// The grace counts from the probe's sending, not from the job's: a job
// routed by a probe answered 450 ms after it was sent, and then stalled
// 700 ms before its write, was confirmed moments after it was written but
// more than divert.Grace after its probe, and is sent again.
func TestIntegrationJobLateCountsFromItsProbeNotItsWrite(t *testing.T) {
	t.Parallel()
	st := &stalls{}
	e := setupStalledDivert(t, nil, st)
	ctx := testCtx(t)
	var probes, writes atomic.Int32
	st.afterProbe = func() {
		if probes.Add(1) == 1 {
			time.Sleep(450 * time.Millisecond)
		}
	}
	st.beforeSend = func() {
		if writes.Add(1) == 1 {
			time.Sleep(700 * time.Millisecond)
		}
	}
	id, err := e.p.Enqueue(ctx, "jobs", "k", 1, nil)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if n := e.p.lateConfirms.Load(); n != 1 {
		t.Errorf("%d late confirms, want 1", n)
	}
	for i := range 2 {
		if d, ok := e.b.get(e.ch, e.work); !ok || d.MessageId != id {
			t.Errorf("copy %d of the job in %s: %q, %v; want %s", i+1, e.work, d.MessageId, ok, id)
		}
	}
}

// A job confirmed too late, whose next try then fails otherwise (here its
// queue is diverted meanwhile into a migration queue that refuses it), is
// not reported as simply refused: the error says the first copy may have
// been enqueued, and it was.
func TestIntegrationFailureAfterALateConfirmSaysTheJobMayBeEnqueued(t *testing.T) {
	t.Parallel()
	st := &stalls{}
	e := setupStalledDivert(t, nil, st)
	ctx := testCtx(t)
	var writes atomic.Int32
	st.beforeSend = func() {
		if writes.Add(1) == 1 {
			time.Sleep(divert.Grace + 100*time.Millisecond)
			e.b.declare(e.migration, true, topology.DivertArgs()) // refuses every message
			e.b.declare(e.divert, topology.DivertDurable, topology.DivertArgs())
		}
	}
	_, err := e.p.Enqueue(ctx, "jobs", "k", 1, nil)
	if !errors.Is(err, ErrNacked) || !strings.Contains(err.Error(), "an earlier try may have enqueued the job") {
		t.Fatalf("Enqueue = %v, want ErrNacked saying an earlier try may have enqueued the job", err)
	}
	if n := e.b.count(e.ch, e.work); n != 1 {
		t.Errorf("%s holds %d copies, want the first try's 1", e.work, n)
	}
}
