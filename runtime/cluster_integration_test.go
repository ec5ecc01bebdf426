//go:build integration

package queuey_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// The runtime on scripts/cluster.sh's three-node RabbitMQ 4.0 cluster
// (QUEUEY_CLUSTER_AMQP_URL, QUEUEY_CLUSTER_ENDPOINTS; skipped without them).
// The test stops a node, so it holds brokertest.ClusterLock while it runs
// and restarts the node whatever happens.

type clJob struct {
	Seq int `json:"seq"`
}

func (clJob) Kind() string  { return "cluster.job" }
func (clJob) Queue() string { return "jobs" }

// clLedger is what happened to each job, by Seq.
type clLedger struct {
	mu        sync.Mutex
	confirmed map[int]time.Time
	failed    map[int]error
	failedAt  map[int]time.Time // when the failed call returned
	handled   map[int]int
	handledAt []time.Time // every successful run
}

func newCLLedger() *clLedger {
	return &clLedger{confirmed: map[int]time.Time{}, failed: map[int]error{}, failedAt: map[int]time.Time{}, handled: map[int]int{}}
}

func (l *clLedger) enqueued(seq int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.confirmed[seq] = time.Now()
	} else {
		l.failed[seq] = err
		l.failedAt[seq] = time.Now()
	}
}

// failedImmediate counts the failed enqueues of jobs that were not
// delayed (every tenth seq is).
func (l *clLedger) failedImmediate() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for seq := range l.failed {
		if seq%10 != 0 {
			n++
		}
	}
	return n
}

// failures counts the failed enqueues that returned before each of times,
// and after the last.
func (l *clLedger) failures(times ...time.Time) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]int, len(times)+1)
	for _, at := range l.failedAt {
		i := sort.Search(len(times), func(i int) bool { return at.Before(times[i]) })
		out[i]++
	}
	return out
}

func (l *clLedger) work(_ context.Context, job *queuey.Job[clJob]) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.handled[job.Args.Seq]++
	l.handledAt = append(l.handledAt, time.Now())
	return nil
}

// lost lists the confirmed jobs never handled.
func (l *clLedger) lost() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int
	for seq := range l.confirmed {
		if l.handled[seq] == 0 {
			out = append(out, seq)
		}
	}
	sort.Ints(out)
	return out
}

// between counts the jobs confirmed and the runs handled in [from, to).
func (l *clLedger) between(from, to time.Time) (confirmed, handled int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, at := range l.confirmed {
		if !at.Before(from) && at.Before(to) {
			confirmed++
		}
	}
	for _, at := range l.handledAt {
		if !at.Before(from) && at.Before(to) {
			handled++
		}
	}
	return confirmed, handled
}

// firstRunAfter is the time of the first successful run after t (zero if
// none).
func (l *clLedger) firstRunAfter(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, at := range l.handledAt {
		if at.After(t) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

func (l *clLedger) summary() (confirmed, failed, handled, dups int, errs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, err := range l.failed {
		if s := err.Error(); !seen[s] && len(errs) < 3 {
			seen[s] = true
			errs = append(errs, s)
		}
	}
	for _, n := range l.handled {
		handled++
		dups += n - 1
	}
	return len(l.confirmed), len(l.failed), handled, dups, errs
}

// TestIntegrationClusterNodeStopLosesNoConfirmedJob runs a producer and a
// worker pool on a quorum queue set of the cluster, both connected first to
// node 1 (the URL's first host), and stops node 1 while 2,000 jobs flow (one
// in ten delayed 300-500 ms, through hold queues), then starts it again.
// Both must fail over to another node while node 1 is down, and every
// confirmed job must be handled at least once; duplicates are allowed and
// logged.
func TestIntegrationClusterNodeStopLosesNoConfirmedJob(t *testing.T) {
	const jobs, producers, stopAt = 2000, 8, 300
	// Each producer goroutine waits this long between its enqueues, so that
	// the flow lasts through the outage (about 150 jobs/s, 13 s).
	const pace = 50 * time.Millisecond
	c := brokertest.OpenCluster(t)
	prefix := c.NewPrefix("clit")
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.QueueConfig{
		{Name: "jobs", Prefetch: 64, QueueType: queuey.QueueTypeQuorum},
	}}
	var logs brokertest.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	l := newCLLedger()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod, err := queuey.NewProducer(ctx, c.AMQPURL, set, &queuey.ProducerOptions{Logger: logger})
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	t.Cleanup(func() { _ = prod.Close() })
	ws := queuey.NewWorkers()
	queuey.AddWorker(ws, queuey.WorkFunc[clJob](l.work))
	pool, err := queuey.NewWorkerPool(ctx, c.AMQPURL, set, ws, &queuey.WorkerOptions{
		Logger: logger,
		Retry:  &queuey.RetryPolicy{Strategy: queuey.RetryFixed, Base: time.Second, MaxAttempts: 10},
	})
	if err != nil {
		t.Fatalf("NewWorkerPool: %v", err)
	}
	if err := pool.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := pool.Stop(ctx); err != nil && !errors.Is(err, queuey.ErrClosed) {
			t.Errorf("Stop: %v", err)
		}
	})

	var confirmedN atomic.Int64
	var stopBegan, stopDone, restartBegan, restartDone time.Time
	outage := make(chan struct{})
	go func() {
		defer close(outage)
		for confirmedN.Load() < stopAt {
			time.Sleep(20 * time.Millisecond)
		}
		stopBegan = time.Now()
		if err := c.StopNode(1, false); err != nil {
			t.Errorf("%v", err)
			return
		}
		stopDone = time.Now()
		time.Sleep(3 * time.Second)
		restartBegan = time.Now()
		if err := c.RestartNode(1); err != nil {
			t.Errorf("%v", err)
		}
		restartDone = time.Now()
	}()

	began := time.Now()
	var wg sync.WaitGroup
	var next, slowest atomic.Int64
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seq := int(next.Add(1)) - 1
				if seq >= jobs {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				callStart := time.Now()
				var err error
				if seq%10 == 0 {
					_, err = queuey.EnqueueJobAfter(ctx, prod, clJob{Seq: seq}, time.Duration(300+100*(seq%3))*time.Millisecond, nil)
				} else {
					_, err = queuey.EnqueueJob(ctx, prod, clJob{Seq: seq}, nil)
				}
				cancel()
				if d := int64(time.Since(callStart)); d > slowest.Load() {
					slowest.Store(d)
				}
				l.enqueued(seq, err)
				if err == nil {
					confirmedN.Add(1)
				}
				time.Sleep(pace)
			}
		}()
	}
	wg.Wait()
	produced := time.Since(began)
	<-outage
	if t.Failed() {
		t.Fatalf("the node could not be stopped or restarted; logs:\n%s", tailOf(logs.String(), 4000))
	}

	deadline := time.Now().Add(45 * time.Second)
	for len(l.lost()) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	confirmed, failed, handled, dups, errs := l.summary()
	downConfirmed, downHandled := l.between(stopDone, restartBegan)
	firstRun := l.firstRunAfter(stopDone)
	t.Logf("%d jobs: %d confirmed, %d enqueues failed, %d handled, %d duplicates; producing took %s, slowest enqueue %s",
		jobs, confirmed, failed, handled, dups, produced.Round(100*time.Millisecond), time.Duration(slowest.Load()).Round(time.Millisecond))
	t.Logf("node 1: stopnode took %s, down %s (restart took %s); while it was down %d jobs were confirmed and %d runs handled; first run after the stop: %s after stopnode began",
		stopDone.Sub(stopBegan).Round(100*time.Millisecond), restartDone.Sub(stopDone).Round(100*time.Millisecond),
		restartDone.Sub(restartBegan).Round(100*time.Millisecond), downConfirmed, downHandled, sinceOrNever(firstRun, stopBegan))
	if len(errs) > 0 {
		f := l.failures(stopBegan, stopDone, restartBegan, restartDone)
		t.Logf("failed enqueues: %d before the stop, %d while node 1 stopped, %d while it was down, %d while it restarted, %d after; e.g.: %s",
			f[0], f[1], f[2], f[3], f[4], strings.Join(errs, " / "))
	}
	// Immediate jobs go to the quorum work queue, which stays available
	// with two nodes of three: none may fail. Delayed ones go through a
	// hold queue, a classic queue on the node the producer was on when it
	// first declared it (node 1): while that node is down, its
	// declarations answer 404 NOT_FOUND and those enqueues fail
	// (RELIABILITY.md, issue 17); they are counted above, not failed.
	if n := l.failedImmediate(); n > 0 {
		t.Errorf("%d enqueues of immediate jobs failed; the quorum work queue should have taken them through another node", n)
	}
	if lost := l.lost(); len(lost) > 0 {
		t.Errorf("%d confirmed jobs were never handled (lost), e.g. seq %v", len(lost), lost[:min(len(lost), 10)])
	}
	if downConfirmed == 0 {
		t.Error("no job was confirmed while node 1 was down: the producer did not fail over to another node")
	}
	if downHandled == 0 {
		t.Error("no job was handled while node 1 was down: the worker pool did not fail over to another node")
	}
	if confirmed < jobs*9/10 {
		t.Errorf("only %d of %d enqueues were confirmed", confirmed, jobs)
	}
	if t.Failed() {
		t.Logf("logs (info and up):\n%s", tailOf(logs.String(), 6000))
	}
}

// sinceOrNever is t - from, or "never" when t is zero.
func sinceOrNever(t, from time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Sub(from).Round(10 * time.Millisecond).String()
}

// tailOf is the last n bytes of s.
func tailOf(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("…%s", s[len(s)-n:])
}
