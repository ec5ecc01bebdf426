//go:build integration

package migrate

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
	"github.com/queuey/terraform-provider-queuey/internal/divert"
	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

type migJob struct {
	N int `json:"n"`
}

func (migJob) Kind() string  { return "migrate.test" }
func (migJob) Queue() string { return "jobs" }

// TestIntegrationMigrateWhileProducersAndWorkersRun migrates a queue that
// holds 5,000 jobs while queuey producers keep enqueueing onto it and a
// queuey worker pool keeps consuming it, both configured with the old
// arguments, as a deployment is until it is redeployed: every job a producer
// had confirmed is handled at least once. The producers follow the divert
// protocol (package internal/divert), so none publishes to the queue while it is
// deleted, and none of their jobs is lost to that race.
func TestIntegrationMigrateWhileProducersAndWorkersRun(t *testing.T) {
	t.Parallel()
	b := newMigBroker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	set := queuey.QueueSet{Prefix: b.prefix, Queues: []queuey.QueueConfig{{Name: "jobs", MaxPriority: queuey.NoPriority}}}
	q := set.WorkQueue("jobs")
	// What the test shows when jobs are missing, last of all (after the
	// deferred Stop), so that it ends the output: the goroutines and the
	// queues as they were when the wait for the jobs ran out (still queued:
	// the pool stopped consuming; dead-lettered; or nowhere), and the
	// producer's and the pool's log.
	var logs brokertest.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	var stacks, queues string
	defer func() {
		if t.Failed() {
			t.Logf("goroutines when the wait ran out:\n%s", stacks)
			t.Logf("the producer's and the pool's log:\n%s", logs.String())
			t.Logf("queues when the wait ran out:\n%s", queues)
		}
	}()
	prod, err := queuey.NewProducer(ctx, b.url, set, &queuey.ProducerOptions{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = prod.Close() }()

	var mu sync.Mutex
	confirmed := map[string]time.Time{}
	handled := map[string]int{}
	batch := make([]queuey.BatchJob, migMessages)
	for i := range batch {
		batch[i] = queuey.BatchJob{Queue: "jobs", JobType: migJob{}.Kind(), Payload: migJob{N: i}}
	}
	ids, err := prod.EnqueueBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		confirmed[id] = time.Time{} // long before the migration
	}

	workers := queuey.NewWorkers()
	queuey.AddWorker(workers, queuey.WorkFunc[migJob](func(ctx context.Context, job *queuey.Job[migJob]) error {
		time.Sleep(10 * time.Millisecond) // keep a backlog through the migration
		mu.Lock()
		handled[job.ID]++
		mu.Unlock()
		return nil
	}))
	pool, err := queuey.NewWorkerPool(ctx, b.url, set, workers, &queuey.WorkerOptions{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pool.Stop(context.Background()) }()

	// Two producers enqueue throughout, and for a second after.
	var stop atomic.Bool
	var failed atomic.Int64
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				id, err := prod.Enqueue(ctx, "jobs", migJob{}.Kind(), migJob{N: -(g*1_000_000 + i)}, nil)
				if err != nil {
					failed.Add(1)
					t.Errorf("Enqueue during the migration: %v", err)
					continue
				}
				at := time.Now()
				mu.Lock()
				confirmed[id] = at
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	handledBefore := len(handled)
	mu.Unlock()
	migStart := time.Now()
	res, err := Migrate(ctx, b.dial(), q, priority10, true, nil)
	migEnd := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	handledDuring := len(handled) - handledBefore
	mu.Unlock()
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()

	deadline := time.Now().Add(2 * time.Minute)
	var missing map[string]time.Time
	for {
		mu.Lock()
		missing = map[string]time.Time{}
		for id, at := range confirmed {
			if handled[id] == 0 {
				missing[id] = at
			}
		}
		mu.Unlock()
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(missing) > 0 {
		var buf bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
		stacks = buf.String()
		// A passive declaration's counts are exact; the management
		// API's lag by its statistics interval.
		for _, name := range []string{q, set.DeadQueue("jobs"), topology.MigrationName(q)} {
			ch := b.channel()
			if st, err := ch.QueueDeclarePassive(name, false, false, false, false, nil); err != nil {
				queues += fmt.Sprintf("%s: %v\n", name, err)
			} else {
				queues += fmt.Sprintf("%s: %d ready, %d consumers\n", name, st.Messages, st.Consumers)
			}
			_ = ch.Close()
		}
	}
	shown := 0
	for id, at := range missing {
		if shown++; shown > 5 {
			t.Errorf("... and %d more jobs never handled", len(missing)-5)
			break
		}
		if at.IsZero() {
			t.Errorf("job %s, preloaded before the migration, was never handled", id)
		} else {
			t.Errorf("job %s, confirmed %v after the queue was deleted, was never handled", id, at.Sub(res.DeletedAt))
		}
	}
	mu.Lock()
	dups := 0
	during := 0
	for id, n := range handled {
		dups += n - 1
		if at := confirmed[id]; at.After(migStart) && at.Before(migEnd) {
			during++
		}
	}
	t.Logf("migration %+v", res)
	t.Logf("confirmed %d jobs (%d preloaded), handled %d distinct (%d while the migration ran; %d of them confirmed while it ran), %d handled twice or more, %d missing, %d enqueue errors",
		len(confirmed), migMessages, len(handled), handledDuring, during, dups, len(missing), failed.Load())
	mu.Unlock()
	if failed.Load() > 0 {
		t.Errorf("%d enqueues failed", failed.Load())
	}
	if res.Diverted < divert.Grace {
		t.Errorf("producers were diverted for %v, want at least the grace %v", res.Diverted, divert.Grace)
	}
	if got := b.args(q)[topology.ArgMaxPriority]; got != float64(10) {
		t.Errorf("%s has x-max-priority %v, want 10", q, got)
	}
	for _, left := range []string{topology.MigrationName(q), topology.DivertName(q)} {
		if ok, _ := b.exists(left); ok {
			t.Errorf("%s is still there", left)
		}
	}
}
