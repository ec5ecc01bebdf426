//go:build integration

package migrate

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
// had confirmed is handled at least once, except a job confirmed at the very
// moment the queue was deleted, which RabbitMQ drops (see
// lostOnlyAroundTheDelete); those are counted.
func TestIntegrationMigrateWhileProducersAndWorkersRun(t *testing.T) {
	t.Parallel()
	b := newMigBroker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	set := queuey.QueueSet{Prefix: b.prefix, Queues: []queuey.QueueConfig{{Name: "jobs", MaxPriority: queuey.NoPriority}}}
	q := set.WorkQueue("jobs")
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
	res, err := Migrate(ctx, b.dial(), q, priority10, true, nil)
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
		// Jobs lost to the deletion race never turn up: stop waiting
		// once nothing else is missing.
		settled := true
		for _, at := range missing {
			if d := at.Sub(res.DeletedAt); d < -raceWindow || d > raceWindow {
				settled = false
			}
		}
		if settled || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	racing := lostOnlyAroundTheDelete(t, missing, res.DeletedAt)
	mu.Lock()
	dups := 0
	for _, n := range handled {
		dups += n - 1
	}
	t.Logf("migration %+v", res)
	t.Logf("confirmed %d jobs (%d preloaded), handled %d distinct (%d during the migration), %d handled twice or more, %d missing (%d racing the delete), %d enqueue errors",
		len(confirmed), migMessages, len(handled), handledDuring, dups, len(missing), racing, failed.Load())
	mu.Unlock()
	if got := b.args(q)[topology.ArgMaxPriority]; got != float64(10) {
		t.Errorf("%s has x-max-priority %v, want 10", q, got)
	}
	if ok, _ := b.exists(topology.MigrationName(q)); ok {
		t.Errorf("%s is still there", topology.MigrationName(q))
	}
}
