package queuey

import (
	"context"
	"errors"
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
