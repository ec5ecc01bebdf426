//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// faultJob is the job every load test runs. Seq identifies it across
// deliveries, whatever its job id (a failed enqueue has none). FailUntil
// makes attempts up to it fail, so that the job is retried through a hold
// queue.
type faultJob struct {
	Seq       int `json:"seq"`
	FailUntil int `json:"fail_until,omitempty"`
}

func (faultJob) Kind() string  { return "fault.job" }
func (faultJob) Queue() string { return "jobs" }

// ledger counts what happened to every job of a test, by Seq.
type ledger struct {
	mu        sync.Mutex
	published int
	confirmed map[int]bool
	failed    map[int]error
	handled   map[int]int // successful runs (acked), by Seq
	firstAt   map[int]time.Time
	confAt    map[int]time.Time
	runs      int
	// work is how long each run takes, so that a backlog builds up.
	work time.Duration
}

func newLedger() *ledger {
	return &ledger{confirmed: map[int]bool{}, failed: map[int]error{}, handled: map[int]int{},
		firstAt: map[int]time.Time{}, confAt: map[int]time.Time{}}
}

// enqueued records the outcome of one enqueue call.
func (l *ledger) enqueued(seq int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.published++
	if err == nil {
		l.confirmed[seq] = true
		l.confAt[seq] = time.Now()
	} else {
		l.failed[seq] = err
	}
}

// worker is the handler: it fails attempts up to FailUntil, and counts
// every run that succeeds.
func (l *ledger) worker() queuey.WorkFunc[faultJob] {
	return func(ctx context.Context, job *queuey.Job[faultJob]) error {
		l.mu.Lock()
		l.runs++
		l.mu.Unlock()
		if l.work > 0 {
			time.Sleep(l.work)
		}
		if job.Attempt <= job.Args.FailUntil {
			return fmt.Errorf("attempt %d of job %d fails on purpose", job.Attempt, job.Args.Seq)
		}
		l.mu.Lock()
		if l.handled[job.Args.Seq] == 0 {
			l.firstAt[job.Args.Seq] = time.Now()
		}
		l.handled[job.Args.Seq]++
		l.mu.Unlock()
		return nil
	}
}

// counts returns published, confirmed, handled (distinct jobs whose handler
// succeeded), lost (confirmed but never handled) and duplicates (successful
// runs beyond the first, per job).
func (l *ledger) counts() (published, confirmed, handled, lost, dups int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for seq := range l.confirmed {
		if l.handled[seq] == 0 {
			lost++
		}
	}
	for _, n := range l.handled {
		handled++
		dups += n - 1
	}
	return l.published, len(l.confirmed), handled, lost, dups
}

// allHandled reports whether every confirmed job was handled.
func (l *ledger) allHandled() bool {
	_, _, _, lost, _ := l.counts()
	return lost == 0
}

// unconfirmedHandled is how many jobs whose enqueue returned an error were
// handled anyway: the broker took them but the confirm was lost.
func (l *ledger) unconfirmedHandled() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for seq := range l.failed {
		if l.handled[seq] > 0 {
			n++
		}
	}
	return n
}

// heldThrough counts the jobs matching which that were confirmed before
// down and first handled after up, and how many of those there are.
func (l *ledger) heldThrough(which func(seq int) bool, down, up time.Time) (confirmed, handledAfter int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for seq, at := range l.confAt {
		if !which(seq) || !at.Before(down) {
			continue
		}
		confirmed++
		if h, ok := l.firstAt[seq]; ok && h.After(up) {
			handledAfter++
		}
	}
	return confirmed, handledAfter
}

// firstErrors returns up to n distinct enqueue errors, for the report.
func (l *ledger) firstErrors(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, err := range l.failed {
		s := err.Error()
		if !seen[s] && len(out) < n {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// row builds the report line from the ledger.
func (l *ledger) row(fault, load string, took time.Duration, note string) row {
	p, c, h, lost, d := l.counts()
	return row{Fault: fault, Load: load, Published: p, Confirmed: c, Handled: h, Lost: lost, Dups: d, Took: took, Note: note}
}

// jobsSet is the one-queue set of the load tests.
func jobsSet(prefix string) queuey.QueueSet {
	return queuey.QueueSet{Prefix: prefix, Queues: []queuey.QueueConfig{{Name: "jobs", Prefetch: 64}}}
}

// startPool builds and starts a worker pool for l over url, stopped when the
// test ends.
func startPool(t testing.TB, url string, set queuey.QueueSet, l *ledger, opts *queuey.WorkerOptions) *queuey.WorkerPool {
	t.Helper()
	ws := queuey.NewWorkers()
	queuey.AddWorker(ws, l.worker())
	if opts == nil {
		opts = &queuey.WorkerOptions{}
	}
	if opts.Retry == nil {
		opts.Retry = &queuey.RetryPolicy{Strategy: queuey.RetryFixed, Base: time.Second, MaxAttempts: 10}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := queuey.NewWorkerPool(ctx, url, set, ws, opts)
	if err != nil {
		t.Fatalf("NewWorkerPool: %v", err)
	}
	if err := pool.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := pool.Stop(ctx); err != nil && !errors.Is(err, queuey.ErrClosed) {
			t.Errorf("Stop: %v", err)
		}
	})
	return pool
}

// newProducer builds a producer over url, closed when the test ends.
func newProducer(t testing.TB, url string, set queuey.QueueSet, opts *queuey.ProducerOptions) *queuey.Producer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := queuey.NewProducer(ctx, url, set, opts)
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
