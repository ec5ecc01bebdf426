//go:build faults

package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// TestFaultBrokerRestartUnderLoad enqueues 10,000 persistent jobs from 32
// goroutines, some of them delayed (4 s and 15 s, so that some sit in hold
// queues through the outage), while a worker pool consumes, and stops and
// starts the broker application (rabbitmqctl stop_app, start_app) once a
// quarter of them are confirmed. Every call must return, with an error or a
// confirmed job; every confirmed job must be handled at least once.
func TestFaultBrokerRestartUnderLoad(t *testing.T) {
	const jobs, producers = 10_000, 32
	prefix := uniquePrefix(t, "restart")
	set := jobsSet(prefix)
	var logs logBuffer
	l := newLedger()
	prod := newProducer(t, amqpURL(), set, &queuey.ProducerOptions{Logger: quiet(&logs)})
	startPool(t, amqpURL(), set, l, &queuey.WorkerOptions{Logger: quiet(&logs)})

	var confirmedN atomic.Int64
	restarted := make(chan struct{})
	var outage time.Duration
	var down, up time.Time
	go func() {
		defer close(restarted)
		within(5*time.Minute, func() bool { return confirmedN.Load() >= jobs/4 })
		began := time.Now()
		down = began
		ctl(t, "stop_app")
		time.Sleep(3 * time.Second)
		// A job handled after this cannot have been handled before
		// the stop: the broker was down in between.
		up = time.Now()
		ctl(t, "start_app")
		ctl(t, "await_startup")
		outage = time.Since(began)
	}()

	began := time.Now()
	var wg sync.WaitGroup
	var slowest atomic.Int64
	spread(&wg, producers, 0, jobs, func(seq int) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		callStart := time.Now()
		var err error
		job := faultJob{Seq: seq}
		switch {
		case seq%20 == 0:
			_, err = queuey.EnqueueJobAfter(ctx, prod, job, 15*time.Second, nil)
		case seq%10 == 0:
			_, err = queuey.EnqueueJobAfter(ctx, prod, job, 4*time.Second, nil)
		default:
			_, err = queuey.EnqueueJob(ctx, prod, job, nil)
		}
		cancel()
		if d := int64(time.Since(callStart)); d > slowest.Load() {
			slowest.Store(d)
		}
		l.enqueued(seq, err)
		if err == nil {
			confirmedN.Add(1)
		}
	})
	wg.Wait()
	produced := time.Since(began)
	<-restarted
	if !within(3*time.Minute, l.allHandled) {
		_, _, _, lost, _ := l.counts()
		t.Errorf("%d confirmed jobs were not handled within 3 min of the end of the load", lost)
	}
	_, c, _, _, _ := l.counts()
	held, heldAfter := l.heldThrough(func(seq int) bool { return seq%20 == 0 }, down, up)
	if heldAfter != held {
		t.Errorf("%d jobs delayed by 15 s were confirmed before stop_app, but only %d were first handled after start_app", held, heldAfter)
	}
	note := fmt.Sprintf("stop_app/start_app once at %d confirmed; outage %s; %d jobs delayed 15 s were confirmed before stop_app, %d of them were first handled after start_app was issued (they sat in hold queues through the outage); %d enqueue calls returned an error, %d of those jobs were handled anyway; slowest call %s; producing took %s",
		jobs/4, outage.Round(100*time.Millisecond), held, heldAfter, jobs-c, l.unconfirmedHandled(),
		time.Duration(slowest.Load()).Round(100*time.Millisecond), produced.Round(100*time.Millisecond))
	if errs := l.firstErrors(2); len(errs) > 0 {
		note += "; e.g. " + strings.Join(errs, " / ")
	}
	record(t, l.row("broker restart under load (stop_app/start_app)",
		fmt.Sprintf("%d persistent jobs, 10%% delayed 4 s/15 s, %d producers, 1 pool (prefetch 64)", jobs, producers),
		time.Since(began), note))
	if t.Failed() {
		t.Logf("warnings and errors logged:\n%s", tail(logs.String(), 4000))
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
