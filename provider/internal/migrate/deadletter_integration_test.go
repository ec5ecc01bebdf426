//go:build integration

package migrate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

type dlJob struct {
	N int `json:"n"`
}

func (dlJob) Kind() string  { return "migrate.dead-letter" }
func (dlJob) Queue() string { return "jobs" }

// TestIntegrationMigrateTheDeadLetterQueueWhileWorkersDeadLetter migrates a
// dead-letter queue (as the provider does when its arguments drifted) while
// queuey producers enqueue a stream of jobs and a queuey worker pool
// dead-letters every one at once, before, during and after the migration:
// every job a producer had confirmed ends in the dead-letter queue, or back
// in its work queue when its dead letter failed, never nowhere.
//
// Regression: dead-letter publishes did not follow the divert protocol, so
// they kept going to the dead-letter queue while the migration deleted it,
// and RabbitMQ confirms and drops a message routed to a queue whose deletion
// is under way: the worker acknowledged the job, and it was lost.
func TestIntegrationMigrateTheDeadLetterQueueWhileWorkersDeadLetter(t *testing.T) {
	t.Parallel()
	b := newMigBroker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	set := queuey.QueueSet{Prefix: b.prefix, Queues: []queuey.QueueConfig{{Name: "jobs", MaxPriority: queuey.NoPriority}}}
	work, dead := set.WorkQueue("jobs"), set.DeadQueue("jobs")
	prod, err := queuey.NewProducer(ctx, b.url, set, &queuey.ProducerOptions{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = prod.Close() }()

	var mu sync.Mutex
	confirmed := map[string]bool{}
	handled := map[string]bool{}
	count := func(m map[string]bool) int {
		mu.Lock()
		defer mu.Unlock()
		return len(m)
	}
	workers := queuey.NewWorkers()
	queuey.AddWorker(workers, queuey.WorkFunc[dlJob](func(_ context.Context, job *queuey.Job[dlJob]) error {
		mu.Lock()
		handled[job.ID] = true
		mu.Unlock()
		return queuey.JobFatal(errors.New("dead-letter it"))
	}))
	pool, err := queuey.NewWorkerPool(ctx, b.url, set, workers, &queuey.WorkerOptions{Logger: logger, Concurrency: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = pool.Stop(context.Background())
		}
	}()

	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range dlProducers {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				id, err := prod.Enqueue(ctx, "jobs", dlJob{}.Kind(), dlJob{N: g*1_000_000 + i}, nil)
				if err != nil {
					t.Errorf("Enqueue: %v", err)
					return
				}
				mu.Lock()
				confirmed[id] = true
				mu.Unlock()
				time.Sleep(dlPause)
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	before := count(handled)
	migCtx, migCancel := context.WithTimeout(ctx, 30*time.Second)
	res, migErr := Migrate(migCtx, b.dial(), dead, priority10, topology.DeadDurable, nil)
	migCancel()
	during := count(handled) - before
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	t.Logf("migration %+v; %d jobs dead-lettered while it ran", res, during)
	if migErr != nil {
		t.Errorf("migrate %s: %v", dead, migErr)
	}
	if during < 100 {
		t.Errorf("only %d jobs were dead-lettered while the migration ran: the test proves nothing", during)
	}
	for count(handled) < count(confirmed) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if err := pool.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true

	found := map[string]bool{}
	for _, q := range []string{dead, topology.MigrationName(dead), work} {
		if ok, _ := b.exists(q); !ok {
			continue
		}
		got, _, _ := b.drain(q)
		for id := range got {
			found[id] = true
		}
	}
	lost := 0
	for id := range confirmed {
		if !found[id] {
			lost++
		}
	}
	t.Logf("%d jobs confirmed, %d dead-lettered, %d in no queue", len(confirmed), len(handled), lost)
	if lost > 0 {
		t.Errorf("%d of %d jobs are in no queue: dead-lettered into %s while the migration deleted it", lost, len(confirmed), dead)
	}
}

// The stream: dlProducers goroutines enqueue one job after another, with
// dlPause between two. Faster, and the migration moving the dead letters
// aside can no longer keep up.
const (
	dlProducers = 1
	dlPause     = 2 * time.Millisecond
)
