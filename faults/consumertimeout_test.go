//go:build faults

package faults

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// slowJob outlives the broker's consumer_timeout on its first attempt.
type slowJob struct{}

func (slowJob) Kind() string  { return "fault.slow" }
func (slowJob) Queue() string { return "jobs" }

// TestFaultConsumerTimeoutClosesTheChannel sets the fault node's
// consumer_timeout to one minute (the broker's minimum; restored
// afterwards), runs one job that outlives it beside a stream of half-second
// jobs on the same channel, and checks what the pool makes of the channel
// the broker closes: the close is logged as a consumer timeout, the pool
// resubscribes, the slow job counts one attempt (it runs again once, at
// attempt 2), the jobs that only shared its channel count none, and no
// confirmed job is lost.
func TestFaultConsumerTimeoutClosesTheChannel(t *testing.T) {
	out, err := script("ctl", "eval", "application:get_env(rabbit, consumer_timeout).")
	if err != nil {
		t.Fatalf("read consumer_timeout: %v\n%s", err, out)
	}
	restore := "application:unset_env(rabbit, consumer_timeout)."
	if m := regexp.MustCompile(`\{ok,(\d+)\}`).FindSubmatch(out); m != nil {
		restore = fmt.Sprintf("application:set_env(rabbit, consumer_timeout, %s).", m[1])
	}
	ctl(t, "eval", "application:set_env(rabbit, consumer_timeout, 60000).")
	t.Cleanup(func() { ctl(t, "eval", restore) })

	prefix := uniquePrefix(t, "ctimeout")
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.QueueConfig{{Name: "jobs", Prefetch: 8}}}
	var logs logBuffer
	l := newLedger()
	l.work = 500 * time.Millisecond
	var laterAttempt atomic.Int64 // good jobs run at attempt > 1: counted, which they must not be
	var slowMu sync.Mutex
	var slowRuns []int
	released := make(chan struct{})
	ws := queuey.NewWorkers()
	inner := l.worker()
	queuey.AddWorker(ws, queuey.WorkFunc[faultJob](func(ctx context.Context, j *queuey.Job[faultJob]) error {
		if j.Attempt > 1 {
			laterAttempt.Add(1)
		}
		return inner(ctx, j)
	}))
	queuey.AddWorker(ws, queuey.WorkFunc[slowJob](func(ctx context.Context, j *queuey.Job[slowJob]) error {
		slowMu.Lock()
		slowRuns = append(slowRuns, j.Attempt)
		slowMu.Unlock()
		if j.Attempt == 1 {
			select {
			case <-released:
			case <-time.After(3 * time.Minute):
			}
		}
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := queuey.NewWorkerPool(ctx, amqpURL(), set, ws, &queuey.WorkerOptions{
		Logger:          logger(&logs),
		ConsumerTimeout: time.Minute,
		Retry:           &queuey.RetryPolicy{Strategy: queuey.RetryFixed, Base: 500 * time.Millisecond, MaxAttempts: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = pool.Stop(ctx)
	})
	prod := newProducer(t, amqpURL(), set, &queuey.ProducerOptions{Logger: quiet(&logs)})
	if _, err := queuey.EnqueueJob(context.Background(), prod, slowJob{}, nil); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := 0; !stop.Load(); seq++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := queuey.EnqueueJob(ctx, prod, faultJob{Seq: seq}, nil)
			cancel()
			l.enqueued(seq, err)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	const closeRecord = "stayed unacknowledged longer than its consumer_timeout"
	sawClose := within(150*time.Second, func() bool { return strings.Contains(logs.String(), closeRecord) })
	closedAfter := time.Since(began)
	close(released)
	time.Sleep(3 * time.Second)
	stop.Store(true)
	wg.Wait()
	if !sawClose {
		t.Errorf("no %q record within 150 s of a job that outlived a one-minute consumer_timeout", closeRecord)
	}
	if !within(30*time.Second, l.allHandled) {
		t.Errorf("not every confirmed job was handled")
	}
	if !within(10*time.Second, func() bool { slowMu.Lock(); defer slowMu.Unlock(); return len(slowRuns) >= 2 }) {
		t.Errorf("the slow job did not run again after its channel was closed")
	}
	time.Sleep(time.Second) // a third run would show here
	took := time.Since(began)

	var outlived, same int
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, closeRecord) {
			outlived, _ = strconv.Atoi(regexp.MustCompile(`outlived=(\d+)`).FindStringSubmatch(line + " outlived=-1")[1])
			same, _ = strconv.Atoi(regexp.MustCompile(`same_channel=(\d+)`).FindStringSubmatch(line + " same_channel=-1")[1])
			break
		}
	}
	slowMu.Lock()
	runs := fmt.Sprint(slowRuns)
	slowMu.Unlock()
	if runs != "[1 2]" {
		t.Errorf("the slow job ran at attempts %s, want [1 2]: the run that outlived the timeout counts once", runs)
	}
	if outlived != 1 {
		t.Errorf("the close record says %d jobs outlived the timeout, want 1", outlived)
	}
	if n := laterAttempt.Load(); n != 0 {
		t.Errorf("%d runs of jobs that only shared the closed channel were at a later attempt: they were counted", n)
	}
	deadLetters := -1
	if dq, err := mgmt(t).GetQueue("/", set.DeadQueue("jobs")); err == nil {
		deadLetters = dq.Messages
	}
	if deadLetters != 0 {
		t.Errorf("%d dead letters (-1: could not read)", deadLetters)
	}
	ackFailed := strings.Count(logs.String(), "could not acknowledge a settled job")
	r := l.row("a job that outlives the broker's consumer_timeout (set to 1 min on the fault node at run time, then restored)",
		"1 job that runs until its channel is closed, beside a job every 100 ms that takes 500 ms; prefetch 8, 1 pool",
		took, fmt.Sprintf("channel closed %s after the slow job was enqueued, logged as a consumer timeout; jobs on it: %d outlived it, %d only shared it; slow job ran at attempts %s; runs of the others at a later attempt: %d; acks that failed on the closed channel: %d (the duplicates are those jobs, run again on the new channel); dead letters: %d",
			closedAfter.Round(time.Second), outlived, same, runs, laterAttempt.Load(), ackFailed, deadLetters))
	r.Published++ // the slow job
	r.Confirmed++
	if len(slowRuns) >= 2 {
		r.Handled++
	}
	record(t, r)
}
