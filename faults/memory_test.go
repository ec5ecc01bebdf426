//go:build faults

package faults

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// memJob is the memory test's job: a tiny payload, counted in a slice
// allocated before the first measurement, so that the test's own
// bookkeeping does not show up as the worker's heap growth.
type memJob struct {
	Seq int `json:"seq"`
}

func (memJob) Kind() string  { return "fault.mem" }
func (memJob) Queue() string { return "jobs" }

type heapSample struct {
	handled    int64
	heap       uint64 // HeapAlloc after a GC
	goroutines int
}

func sampleHeap(handled int64) heapSample {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return heapSample{handled: handled, heap: ms.HeapAlloc, goroutines: runtime.NumGoroutine()}
}

// TestFaultWorkerHeapFlat100k runs 100,000 jobs through one worker pool,
// fed in batches by a producer in the same process, and reads the heap
// (runtime.ReadMemStats after GC) once 10,000 are handled and every 10,000
// after: it must stay flat.
func TestFaultWorkerHeapFlat100k(t *testing.T) {
	const jobs, batch, warmup = 100_000, 500, 10_000
	prefix := uniquePrefix(t, "mem")
	set := jobsSet(prefix)
	var logs logBuffer
	counts := make([]uint32, jobs)
	var handled atomic.Int64
	ws := queuey.NewWorkers()
	queuey.AddWorker(ws, queuey.WorkFunc[memJob](func(ctx context.Context, job *queuey.Job[memJob]) error {
		atomic.AddUint32(&counts[job.Args.Seq], 1)
		handled.Add(1)
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := queuey.NewWorkerPool(ctx, amqpURL(), set, ws, &queuey.WorkerOptions{Logger: quiet(&logs)})
	if err != nil {
		t.Fatalf("NewWorkerPool: %v", err)
	}
	if err := pool.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	prod := newProducer(t, amqpURL(), set, &queuey.ProducerOptions{Logger: quiet(&logs)})

	began := time.Now()
	var confirmed, published atomic.Int64
	fed := make(chan error, 1)
	go func() {
		defer close(fed)
		bj := make([]queuey.BatchJob, batch)
		for start := 0; start < jobs; start += batch {
			// Keep the backlog bounded: the test is about the worker's
			// heap, not the broker's.
			for published.Load()-handled.Load() > 20_000 {
				time.Sleep(5 * time.Millisecond)
			}
			for i := range bj {
				bj[i] = queuey.BatchJob{Queue: "jobs", JobType: "fault.mem", Payload: memJob{Seq: start + i}}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			_, err := prod.EnqueueBatch(ctx, bj)
			cancel()
			published.Add(batch)
			if err != nil {
				fed <- err
				return
			}
			confirmed.Add(batch)
		}
	}()

	var samples []heapSample
	for next := int64(warmup); next <= jobs; next += 10_000 {
		if !within(2*time.Minute, func() bool { return handled.Load() >= next }) {
			t.Fatalf("only %d of %d jobs handled after 2 min", handled.Load(), next)
		}
		samples = append(samples, sampleHeap(handled.Load()))
	}
	if err := <-fed; err != nil {
		t.Fatalf("EnqueueBatch: %v", err)
	}
	took := time.Since(began)
	stopCtx, stopCancel := context.WithTimeout(context.Background(), time.Minute)
	defer stopCancel()
	if err := pool.Stop(stopCtx); err != nil {
		t.Errorf("Stop: %v", err)
	}

	lost, dups, distinct := 0, 0, 0
	for _, n := range counts {
		switch {
		case n == 0:
			lost++
		default:
			distinct++
			dups += int(n) - 1
		}
	}
	first, last := samples[0], samples[len(samples)-1]
	var peak uint64
	var trail []string
	for _, s := range samples {
		peak = max(peak, s.heap)
		trail = append(trail, fmt.Sprintf("%.1f", float64(s.heap)/(1<<20)))
	}
	growth := int64(last.heap) - int64(first.heap)
	t.Logf("heap after GC (MiB) every 10,000 jobs: %s; goroutines %d -> %d", strings.Join(trail, " "), first.goroutines, last.goroutines)
	// Flat: the heap after 100,000 jobs is within 4 MiB of the heap after
	// 10,000. A leak of even 64 bytes a job would show as 5.5 MiB.
	if growth > 4<<20 {
		t.Errorf("the heap grew by %.1f MiB from %d to %d jobs handled", float64(growth)/(1<<20), first.handled, last.handled)
	}
	if last.goroutines > first.goroutines+10 {
		t.Errorf("goroutines grew from %d to %d", first.goroutines, last.goroutines)
	}
	record(t, row{
		Fault:     "memory: one worker pool handling 100,000 jobs",
		Load:      fmt.Sprintf("%d jobs in batches of %d, backlog ≤ 20,000, prefetch 64", jobs, batch),
		Published: int(published.Load()), Confirmed: int(confirmed.Load()), Handled: distinct, Lost: lost, Dups: dups, Took: took,
		Note: fmt.Sprintf("heap after GC %.1f MiB at %d jobs, %.1f MiB at %d (growth %+.2f MiB, peak %.1f MiB; every 10k: %s MiB); goroutines %d → %d; %.0f jobs/s",
			float64(first.heap)/(1<<20), first.handled, float64(last.heap)/(1<<20), last.handled, float64(growth)/(1<<20),
			float64(peak)/(1<<20), strings.Join(trail, ", "), first.goroutines, last.goroutines, float64(jobs)/took.Seconds()),
	})
}
