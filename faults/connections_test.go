//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// TestFaultConnectionsClosedByBroker has the broker close every client
// connection (the producer's, the pool's and the pool's own publisher)
// eight times, a second apart, while 5,000 jobs are enqueued and consumed;
// every tenth job fails its first attempt, so retries go through a hold
// queue while connections drop.
func TestFaultConnectionsClosedByBroker(t *testing.T) {
	const jobs, producers, kills = 5_000, 8, 8
	prefix := uniquePrefix(t, "conns")
	set := jobsSet(prefix)
	var logs logBuffer
	l := newLedger()
	l.work = 2 * time.Millisecond
	prod := newProducer(t, amqpURL(), set, &queuey.ProducerOptions{Logger: quiet(&logs)})
	startPool(t, amqpURL(), set, l, &queuey.WorkerOptions{Logger: quiet(&logs)})

	began := time.Now()
	var closed atomic.Int64
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for range kills {
			time.Sleep(time.Second)
			closed.Add(int64(closeAllConnections(t)))
		}
	}()
	var wg sync.WaitGroup
	spread(&wg, producers, 0, jobs, func(seq int) {
		job := faultJob{Seq: seq}
		if seq%10 == 0 {
			job.FailUntil = 1
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		_, err := queuey.EnqueueJob(ctx, prod, job, nil)
		cancel()
		l.enqueued(seq, err)
		// Spread the load over the kills.
		time.Sleep(5 * time.Millisecond)
	})
	wg.Wait()
	<-killed
	if !within(2*time.Minute, l.allHandled) {
		t.Errorf("not every confirmed job was handled within 2 min")
	}
	_, c, _, _, _ := l.counts()
	note := fmt.Sprintf("%d connection closures over %d rounds, 1 s apart, during enqueue and consume; every 10th job retried once through a hold queue; %d enqueue errors",
		closed.Load(), kills, jobs-c)
	if errs := l.firstErrors(2); len(errs) > 0 {
		note += "; e.g. " + strings.Join(errs, " / ")
	}
	record(t, l.row("connections closed by the broker while producing and consuming",
		fmt.Sprintf("%d jobs, %d producers, 1 pool, handler 2 ms", jobs, producers), time.Since(began), note))
	if t.Failed() {
		t.Logf("warnings and errors logged:\n%s", tail(logs.String(), 4000))
	}
}

// precreateHold declares name on the node with arguments other than the
// ones queuey derives from it, as someone doing it by hand would.
func precreateHold(t *testing.T, name string) {
	t.Helper()
	ac, err := amqp.Dial(amqpURL())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ac.Close()
	ch, err := ac.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-message-ttl": int64(99_000)}); err != nil {
		t.Fatalf("pre-create %s: %v", name, err)
	}
}

// TestFaultRejectedDeclarationBesideBusyPublishes: a hold-queue declaration
// that the broker rejects closes its channel, 200 times, while 2,000
// immediate jobs and 200 jobs delayed by another delay are published on the
// producer's other channels. Only the rejected delays may fail.
func TestFaultRejectedDeclarationBesideBusyPublishes(t *testing.T) {
	const now, bad, good = 2_000, 200, 200
	prefix := uniquePrefix(t, "rejdecl")
	set := jobsSet(prefix)
	var logs logBuffer
	l := newLedger()
	prod := newProducer(t, amqpURL(), set, &queuey.ProducerOptions{Logger: quiet(&logs)})
	startPool(t, amqpURL(), set, l, &queuey.WorkerOptions{Logger: quiet(&logs)})
	precreateHold(t, set.WorkQueue("jobs")+".deferred.2000")

	began := time.Now()
	var refused, otherBad atomic.Int64
	var firstOther atomic.Value
	var wg sync.WaitGroup
	run := func(workers, from, n int, call func(ctx context.Context, seq int) error, done func(seq int, err error)) {
		spread(&wg, workers, from, n, func(seq int) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := call(ctx, seq)
			cancel()
			done(seq, err)
		})
	}
	run(8, 0, now, func(ctx context.Context, seq int) error {
		_, err := queuey.EnqueueJob(ctx, prod, faultJob{Seq: seq}, nil)
		return err
	}, l.enqueued)
	run(4, now, good, func(ctx context.Context, seq int) error {
		_, err := queuey.EnqueueJobAfter(ctx, prod, faultJob{Seq: seq}, time.Second, nil)
		return err
	}, l.enqueued)
	run(4, now+good, bad, func(ctx context.Context, seq int) error {
		_, err := queuey.EnqueueJobAfter(ctx, prod, faultJob{Seq: seq}, 2*time.Second, nil)
		return err
	}, func(seq int, err error) {
		var pe *queuey.PreconditionError
		if errors.As(err, &pe) && errors.Is(err, queuey.ErrPreconditionFailed) {
			refused.Add(1)
			return
		}
		otherBad.Add(1)
		firstOther.CompareAndSwap(nil, fmt.Sprint(err))
	})
	wg.Wait()

	if otherBad.Load() != 0 {
		t.Errorf("%d of the %d delays onto the refused hold queue did not fail with a *PreconditionError; first: %v", otherBad.Load(), bad, firstOther.Load())
	}
	if !within(time.Minute, l.allHandled) {
		t.Errorf("not every confirmed job was handled within 1 min")
	}
	p, c, _, _, _ := l.counts()
	if c != p {
		t.Errorf("%d of %d publishes beside the refused declarations failed: %v", p-c, p, l.firstErrors(3))
	}
	r := l.row("channel closed by a rejected declaration while publishes run on other channels",
		fmt.Sprintf("%d immediate + %d delayed 1 s, beside %d delays onto a refused hold queue; 16 goroutines", now, good, bad),
		time.Since(began),
		fmt.Sprintf("%d of %d refused delays failed with PRECONDITION_FAILED, none of the other %d publishes failed", refused.Load(), bad, p))
	r.Published += bad
	record(t, r)
}

// TestFaultHoldQueuePreconditionFailed: a hold queue pre-created by hand
// with other arguments. The delay that maps to it fails with an error that
// names the queue and says what to do; other delays keep working; once the
// queue is deleted, the same delay works again.
func TestFaultHoldQueuePreconditionFailed(t *testing.T) {
	prefix := uniquePrefix(t, "holdpf")
	set := jobsSet(prefix)
	var logs logBuffer
	l := newLedger()
	prod := newProducer(t, amqpURL(), set, &queuey.ProducerOptions{Logger: quiet(&logs)})
	startPool(t, amqpURL(), set, l, &queuey.WorkerOptions{Logger: quiet(&logs)})
	hold := set.WorkQueue("jobs") + ".deferred.3000"
	precreateHold(t, hold)

	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	published := 0
	_, err := queuey.EnqueueJobAfter(ctx, prod, faultJob{Seq: 0}, 3*time.Second, nil)
	published++
	var pe *queuey.PreconditionError
	switch {
	case err == nil:
		t.Fatalf("a delay onto %s, pre-created with other arguments, succeeded", hold)
	case !errors.As(err, &pe) || !errors.Is(err, queuey.ErrPreconditionFailed):
		t.Fatalf("want a *PreconditionError, got %T: %v", err, err)
	case pe.Queue != hold || pe.Argument == "":
		t.Errorf("the error names queue %q and argument %q; want %q and the argument", pe.Queue, pe.Argument, hold)
	}
	for _, want := range []string{hold, pe.Argument, "delete this one"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	// Other delays, and immediate jobs, on the same producer.
	for seq := 1; seq <= 20; seq++ {
		var err error
		switch seq % 3 {
		case 0:
			_, err = queuey.EnqueueJob(ctx, prod, faultJob{Seq: seq}, nil)
		case 1:
			_, err = queuey.EnqueueJobAfter(ctx, prod, faultJob{Seq: seq}, time.Second, nil)
		default:
			_, err = queuey.DeferJob(ctx, prod, faultJob{Seq: seq}, 4*time.Second, nil)
		}
		published++
		l.enqueued(seq, err)
		if err != nil {
			t.Errorf("job %d after the refused delay: %v", seq, err)
		}
	}
	// Deleting the queue, as the error says, lets the delay work again.
	if _, err := mgmt(t).DeleteQueue("/", hold); err != nil {
		t.Fatalf("delete %s: %v", hold, err)
	}
	_, err = queuey.EnqueueJobAfter(ctx, prod, faultJob{Seq: 21}, 3*time.Second, nil)
	published++
	l.enqueued(21, err)
	if err != nil {
		t.Errorf("the delay once the queue was deleted: %v", err)
	}
	if !within(time.Minute, l.allHandled) {
		t.Errorf("not every confirmed job was handled within 1 min")
	}
	r := l.row("hold queue pre-created with other arguments (PRECONDITION_FAILED)",
		"1 refused delay, then 20 jobs (now, 1 s, deferred 4 s), then the delay again after deleting the queue",
		time.Since(began), fmt.Sprintf("error: %s", err0(pe)))
	r.Published = published
	record(t, r)
}

func err0(pe *queuey.PreconditionError) string {
	if pe == nil {
		return "none"
	}
	return strings.ReplaceAll(pe.Error(), "|", "/")
}
