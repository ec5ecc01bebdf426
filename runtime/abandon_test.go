package queuey

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTimedOutHandlerThatReturnsPromptlyKeepsItsError pins issue 15: a
// handler that returned on its context's deadline, as a well-behaved one
// does, was reported as "job timed out after 50ms: handler abandoned" in 30
// runs of 30, and its own error was lost from the log and the dead letter's
// reason. It keeps its error now; "abandoned" is for a handler still
// running AbandonGrace after the deadline.
var noRetry = NoRetry()

func TestTimedOutHandlerThatReturnsPromptlyKeepsItsError(t *testing.T) {
	t.Parallel()
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[plainArgs](func(ctx context.Context, _ *Job[plainArgs]) error {
		<-ctx.Done()
		return errors.New("upstream call cancelled: " + ctx.Err().Error())
	}))
	d, err := NewDispatcher(ws, &WorkerOptions{JobTimeout: 50 * time.Millisecond, Retry: &noRetry})
	if err != nil {
		t.Fatal(err)
	}
	body := envelopeBody(t, "plain", "p.q1", 1, plainArgs{})
	for i := range 30 {
		o := d.Dispatch(context.Background(), "q1", body)
		if o.Action != ActionDeadLetter || !errors.Is(o.Err, ErrJobTimedOut) || strings.Contains(o.Err.Error(), "abandoned") ||
			!strings.Contains(o.Err.Error(), "upstream call cancelled") || !strings.Contains(o.Reason, "job timed out after 50ms: upstream call cancelled") {
			t.Fatalf("run %d: a handler that returned on its deadline: err %v, reason %q; want its own error, not abandoned", i+1, o.Err, o.Reason)
		}
	}
}

// TestHandlerStillRunningAfterTheGraceIsAbandoned is the other side: a
// handler that ignores its context is abandoned once AbandonGrace has
// passed after its deadline, not before.
func TestHandlerStillRunningAfterTheGraceIsAbandoned(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[plainArgs](func(ctx context.Context, _ *Job[plainArgs]) error {
		<-release
		return nil
	}))
	d, err := NewDispatcher(ws, &WorkerOptions{JobTimeout: 50 * time.Millisecond, Retry: &noRetry})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	o := d.Dispatch(context.Background(), "q1", envelopeBody(t, "plain", "p.q1", 1, plainArgs{}))
	took := time.Since(start)
	if !errors.Is(o.Err, ErrJobTimedOut) || !strings.Contains(o.Err.Error(), "handler abandoned") {
		t.Errorf("a handler ignoring its context: %v, want it abandoned", o.Err)
	}
	if took < 50*time.Millisecond+AbandonGrace || took > 2*time.Second {
		t.Errorf("abandoned after %s, want the 50ms timeout plus the %s grace", took, AbandonGrace)
	}
}

// A handler goroutine's runner keeps one goroutine for its jobs, one after
// another; a job abandoned on it keeps that goroutine, and the next job
// runs at once on another instead of waiting behind it.
func TestRunnerKeepsItsGoroutineUntilAJobIsAbandoned(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	ran := make(chan uint64, 8) // the goroutine each job ran on
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[plainArgs](func(ctx context.Context, j *Job[plainArgs]) error {
		ran <- goroutineID()
		if j.Attempt == 2 {
			<-release // ignores its context: abandoned
		}
		return nil
	}))
	d, err := NewDispatcher(ws, &WorkerOptions{JobTimeout: 50 * time.Millisecond, Retry: &noRetry})
	if err != nil {
		t.Fatal(err)
	}
	var r runner
	defer r.abandon()
	run := func(attempt int) Outcome {
		return d.dispatch(context.Background(), "q1", envelopeBody(t, "plain", "p.q1", attempt, plainArgs{}), nil, redeliveryNone, time.Now(), &r)
	}
	for i := range 3 {
		if o := run(1); o.Action != ActionAck {
			t.Fatalf("job %d: %v %v, want acked", i, o.Action, o.Err)
		}
	}
	first, second, third := <-ran, <-ran, <-ran
	if first != second || second != third {
		t.Errorf("three jobs on one runner ran on goroutines %d, %d, %d; want one", first, second, third)
	}
	if o := run(2); !strings.Contains(fmt.Sprint(o.Err), "handler abandoned") {
		t.Fatalf("a handler ignoring its context: %v, want it abandoned", o.Err)
	}
	stuck := <-ran
	start := time.Now()
	if o := run(1); o.Action != ActionAck {
		t.Fatalf("the job after an abandoned one: %v %v, want acked", o.Action, o.Err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the job after an abandoned one took %s; it waited for the stuck handler", took)
	}
	if next := <-ran; next == stuck {
		t.Errorf("the job after an abandoned one ran on the stuck goroutine %d", next)
	}
}

// goroutineID is the running goroutine's number, from its stack trace's
// first line ("goroutine 42 [running]:").
func goroutineID() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	id, _ := strconv.ParseUint(strings.Fields(string(buf[:n]))[1], 10, 64)
	return id
}
