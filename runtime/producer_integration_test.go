//go:build integration

package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// newTestProducer builds a declared producer for set under the test's
// prefix and closes it at cleanup.
func newTestProducer(t *testing.T, b *testBroker, queues []QueueConfig, opts *ProducerOptions) *Producer {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p, err := NewProducer(ctx, b.url, QueueSet{Prefix: b.prefix, Queues: queues}, opts)
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkQueue compares a queue read through the management API with what
// SPEC §1 says: flags, and arguments exactly, integers as JSON numbers.
func checkQueue(t *testing.T, b *testBroker, name string, durable bool, args map[string]any) {
	t.Helper()
	q := b.queue(name)
	if q == nil {
		t.Errorf("queue %s does not exist", name)
		return
	}
	if q.Durable != durable || bool(q.AutoDelete) || q.Exclusive {
		t.Errorf("queue %s: durable=%v auto_delete=%v exclusive=%v, want durable=%v auto_delete=false exclusive=false",
			name, q.Durable, q.AutoDelete, q.Exclusive, durable)
	}
	// RabbitMQ 4 adds x-queue-type "classic", the default, to every
	// classic queue; any other type stays and fails the comparison.
	if got := topology.WithoutDefaults(q.Arguments); !reflect.DeepEqual(got, args) {
		t.Errorf("queue %s: arguments = %#v, want exactly %#v", name, got, args)
	}
}

func TestIntegrationProducerDeclaresQueueSet(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	queues := []QueueConfig{
		{Name: "default"},
		{Name: "ttl", MessageTTL: time.Minute},
		{Name: "prio5", MaxPriority: 5},
		{Name: "plain", MaxPriority: NoPriority},
		{Name: "transient", NonDurable: true},
	}
	newTestProducer(t, b, queues, nil)

	checkQueue(t, b, b.name("default"), true, map[string]any{"x-max-priority": 10.0})
	checkQueue(t, b, b.name("ttl"), true, map[string]any{"x-max-priority": 10.0, "x-message-ttl": 60000.0})
	checkQueue(t, b, b.name("prio5"), true, map[string]any{"x-max-priority": 5.0})
	checkQueue(t, b, b.name("plain"), true, map[string]any{})
	checkQueue(t, b, b.name("transient"), false, map[string]any{"x-max-priority": 10.0})
	var want []string
	for _, q := range queues {
		checkQueue(t, b, b.name(q.Name)+".dead", true, map[string]any{})
		want = append(want, b.name(q.Name), b.name(q.Name)+".dead")
	}
	got := b.queueNames()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("queues = %v, want exactly %v (no hold queues before a delay)", got, want)
	}

	// A second process with the same configuration declares the same
	// queues without a conflict.
	newTestProducer(t, b, queues, nil)
}

func TestIntegrationInvalidSetDeclaresNothing(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	set := QueueSet{Prefix: b.prefix, Queues: []QueueConfig{{Name: "good"}, {Name: "good.dead"}}}
	_, err := NewProducer(testCtx(t), b.url, set, nil)
	if !errors.Is(err, ErrInvalidName) {
		t.Fatalf("NewProducer with colliding queues = %v, want ErrInvalidName", err)
	}
	if names := b.queueNames(); len(names) != 0 {
		t.Errorf("an invalid set declared %v", names)
	}
}

func TestIntegrationEnqueueAfterWaitsInAHoldQueue(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	p := newTestProducer(t, b, []QueueConfig{{Name: "jobs"}}, &ProducerOptions{DelayGranularity: 500 * time.Millisecond})
	ch := b.channel()
	work := b.name("jobs")
	hold := work + ".deferred.1000"

	start := time.Now()
	id, err := p.EnqueueAfter(testCtx(t), "jobs", "report", map[string]int{"n": 1}, 700*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("EnqueueAfter: %v", err)
	}
	checkQueue(t, b, hold, true, map[string]any{
		"x-message-ttl":             1000.0,
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": work,
		"x-expires":                 2000.0,
	})

	// The job is not in the work queue before its TTL has run out, and is
	// there soon after.
	var arrived time.Duration
	eventually(t, 10*time.Second, 10*time.Millisecond, "the delayed job never reached "+work, func() bool {
		n := b.count(ch, work)
		if n == 0 {
			return false
		}
		arrived = time.Since(start)
		return true
	})
	if arrived < time.Second {
		t.Errorf("the job reached the work queue after %v, before its 1s hold TTL", arrived)
	}
	t.Logf("delayed job arrived after %v", arrived)
	d, ok := b.get(ch, work)
	if !ok {
		t.Fatal("work queue empty")
	}
	if d.MessageId != id || d.Priority != 0 || d.Headers["x-deferrals"] != int64(0) || d.Headers["x-attempt"] != int64(1) {
		t.Errorf("delayed job: id=%s priority=%d headers=%v; want id %s, priority 0, x-deferrals 0, x-attempt 1", d.MessageId, d.Priority, d.Headers, id)
	}
	env, err := decodeEnvelope(d.Body)
	if err != nil || env.JobID != id || env.Queue != work || env.Priority != 0 || env.Deferrals != 0 {
		t.Errorf("delayed job envelope = %+v, %v", env, err)
	}

	// Unused for twice its TTL, the hold queue deletes itself.
	eventually(t, 20*time.Second, 250*time.Millisecond, "the idle hold queue "+hold+" still exists", func() bool {
		return b.queue(hold) == nil
	})
}

// A hold queue expires 2*TTL after its last declaration; publishing into it
// does not renew it. A producer that remembered having declared it would see
// it deleted under a steady stream of delays, and its publishes returned.
func TestIntegrationHoldQueueIsRedeclaredBeforeEveryPublish(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	p := newTestProducer(t, b, []QueueConfig{{Name: "jobs"}}, &ProducerOptions{DelayGranularity: 250 * time.Millisecond})
	ctx := testCtx(t)
	hold := b.name("jobs") + ".deferred.250" // x-expires 500 ms
	const n = 12
	for i := range n {
		if _, err := p.EnqueueAfter(ctx, "jobs", "t", i, 100*time.Millisecond, nil); err != nil {
			t.Fatalf("delay %d, %v after the first: %v", i, time.Duration(i)*200*time.Millisecond, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ch := b.channel()
	eventually(t, 10*time.Second, 20*time.Millisecond, "not every delayed job arrived", func() bool {
		return b.count(ch, b.name("jobs")) == n
	})
	eventually(t, 10*time.Second, 100*time.Millisecond, "the idle hold queue "+hold+" still exists", func() bool {
		return b.queue(hold) == nil
	})
}

// heldStall is a held publish stalled through the producer's seams (see
// stalls): the first declaration of its hold queue is followed by
// declaredStall before the job is sent, and the second, the renewal when
// there is one, is preceded by renewalStall. With staleFlight, the renewal
// shares a declaration of the hold queue that began an hour ago, and ends
// 10 ms later without having done anything.
type heldStall struct {
	declaredStall, renewalStall time.Duration
	staleFlight                 bool
}

// enqueueStalled sends one job through a hold queue of 500 ms (x-expires
// 1 s) with stall's delays, waits until the hold queue has expired, so
// that no copy of the job can still be on its way, and returns the
// producer and how many copies reached the work queue.
func enqueueStalled(t *testing.T, stall heldStall) (*Producer, int) {
	t.Helper()
	b := newTestBroker(t)
	st := &stalls{declare: func(n int, real func() (time.Time, error)) (time.Time, error) {
		switch n {
		case 1:
			at, err := real()
			time.Sleep(stall.declaredStall)
			return at, err
		case 2:
			time.Sleep(stall.renewalStall)
			if stall.staleFlight {
				started := time.Now().Add(-time.Hour)
				time.Sleep(10 * time.Millisecond)
				return started, nil
			}
		}
		return real()
	}}
	p := newStalledProducer(t, b, []QueueConfig{{Name: "jobs"}}, &ProducerOptions{DelayGranularity: 500 * time.Millisecond}, st)
	work := b.name("jobs")
	hold := work + ".deferred.500"
	start := time.Now()
	if _, err := p.EnqueueAfter(testCtx(t), "jobs", "t", 1, 500*time.Millisecond, nil); err != nil {
		t.Fatalf("EnqueueAfter: %v", err)
	}
	t.Logf("EnqueueAfter returned after %v", time.Since(start).Round(time.Millisecond))
	eventually(t, 15*time.Second, 50*time.Millisecond, "the hold queue "+hold+" never expired", func() bool {
		return b.queue(hold) == nil
	})
	ch := b.channel()
	return p, b.count(ch, work)
}

// Regression: a hold queue expires 2*TTL after its declaration, and an
// expiring queue deletes the messages in it. A job that reached the queue
// more than one TTL after the declaration (here 700 ms into a 500 ms TTL:
// the queue expires at 1 s, the job would leave at 1.2 s) was confirmed
// and then deleted with the queue. The producer now renews the queue.
//
// With a stale flight, the renewal shares a declaration begun before the
// job arrived, more than a TTL before its confirm, which may renew the
// queue too early to outlast the job: it declares the queue once more.
func TestIntegrationHeldJobStalledPastTheTTLRenewsItsHoldQueue(t *testing.T) {
	t.Parallel()
	for _, staleFlight := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale-flight=%v", staleFlight), func(t *testing.T) {
			t.Parallel()
			p, n := enqueueStalled(t, heldStall{declaredStall: 700 * time.Millisecond, staleFlight: staleFlight})
			if n != 1 {
				t.Errorf("%d copies of the job reached the work queue, want 1", n)
			}
			if r, s := p.heldRenewals.Load(), p.heldResends.Load(); r != 1 || s != 0 {
				t.Errorf("%d renewals, %d resends; want 1 renewal in time and no resend", r, s)
			}
		})
	}
}

// When even the renewal comes later than 2*TTL after the declaration, the
// queue may have expired with the job in it (here it did: it expired at
// 1 s, and the renewal came at 1.1 s): the job is sent again.
func TestIntegrationHeldJobWhoseRenewalCameTooLateIsSentAgain(t *testing.T) {
	t.Parallel()
	p, n := enqueueStalled(t, heldStall{declaredStall: 700 * time.Millisecond, renewalStall: 400 * time.Millisecond})
	if n < 1 {
		t.Errorf("the job never reached the work queue: lost with its hold queue")
	}
	t.Logf("%d copies of the job reached the work queue (%d duplicates)", n, max(n-1, 0))
	if r, s := p.heldRenewals.Load(), p.heldResends.Load(); r != 1 || s != 1 {
		t.Errorf("%d renewals, %d resends; want 1 of each", r, s)
	}
}

// A job stalled past 2*TTL between its hold queue's declaration and its
// sending (here 1.3 s into a 500 ms TTL: the queue expired at 1 s) is
// returned as unroutable: it declares the queue again and is sent again,
// once, since the first copy reached no queue.
func TestIntegrationHeldJobThatFindsItsHoldQueueExpiredIsSentAgain(t *testing.T) {
	t.Parallel()
	p, n := enqueueStalled(t, heldStall{declaredStall: 1300 * time.Millisecond})
	if n != 1 {
		t.Errorf("%d copies of the job reached the work queue, want 1", n)
	}
	if r, s := p.heldRenewals.Load(), p.heldResends.Load(); r != 0 || s != 1 {
		t.Errorf("%d renewals, %d resends; want no renewal and 1 resend", r, s)
	}
}

// The renewal is for stalls only: held publishes confirmed within their
// TTL of the declaration renew nothing and send nothing twice.
func TestIntegrationHeldPublishesInTimeDoNotRenew(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	p := newTestProducer(t, b, []QueueConfig{{Name: "jobs"}}, &ProducerOptions{DelayGranularity: 500 * time.Millisecond})
	ctx := testCtx(t)
	const goroutines, each = 4, 10
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := range each {
				if _, err := p.EnqueueAfter(ctx, "jobs", "t", i, 100*time.Millisecond, nil); err != nil {
					t.Errorf("EnqueueAfter: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if r, s := p.heldRenewals.Load(), p.heldResends.Load(); r != 0 || s != 0 {
		t.Errorf("%d renewals, %d resends; want none", r, s)
	}
	ch := b.channel()
	eventually(t, 10*time.Second, 20*time.Millisecond, "not every delayed job arrived", func() bool {
		return b.count(ch, b.name("jobs")) == goroutines*each
	})
}

func TestIntegrationDeferredJobOvertakesBacklog(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	p := newTestProducer(t, b, []QueueConfig{{Name: "jobs"}}, &ProducerOptions{DeferGranularity: 200 * time.Millisecond})
	ch := b.channel()
	work := b.name("jobs")
	ctx := testCtx(t)

	var backlog []string
	for i := range 5 {
		id, err := p.Enqueue(ctx, "jobs", "backlog", i, nil)
		if err != nil {
			t.Fatal(err)
		}
		backlog = append(backlog, id)
	}
	deferred, err := p.Defer(ctx, "jobs", "retry_after", "later", 150*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("Defer: %v", err)
	}
	if b.queue(work+".deferred.200") == nil {
		t.Errorf("no hold queue %s.deferred.200 after a 150ms defer at 200ms granularity", work)
	}
	eventually(t, 10*time.Second, 20*time.Millisecond, "the deferred job never came back", func() bool {
		return b.count(ch, work) == 6
	})

	var order []string
	for range 6 {
		d, ok := b.get(ch, work)
		if !ok {
			t.Fatal("work queue ran dry")
		}
		order = append(order, d.MessageId)
		if d.MessageId == deferred {
			env, err := decodeEnvelope(d.Body)
			if err != nil {
				t.Fatal(err)
			}
			if d.Priority != 10 || env.Priority != 10 || env.Deferrals != 0 || d.Headers["x-deferrals"] != int64(0) || env.Attempt != 1 {
				t.Errorf("deferred job: priority %d, envelope %+v, headers %v; want priority 10, no deferral counted (as the original queuey's producer), attempt 1", d.Priority, env, d.Headers)
			}
		} else if d.Priority != 0 {
			t.Errorf("backlog job %s has priority %d, want 0", d.MessageId, d.Priority)
		}
	}
	if want := append([]string{deferred}, backlog...); !slices.Equal(order, want) {
		t.Errorf("delivery order = %v, want the deferred job first, then the backlog in order: %v", order, want)
	}
}

func TestIntegrationDelayTooLongIsRefusedAndNothingIsPublished(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	p := newTestProducer(t, b, []QueueConfig{{Name: "jobs"}}, nil)
	ctx := testCtx(t)
	const want = "delay of 30d is longer than a hold queue can wait (24d 20h 31m 23s); it was refused rather than released early"

	for name, call := range map[string]func() (string, error){
		"EnqueueAfter": func() (string, error) {
			return p.EnqueueAfter(ctx, "jobs", "t", nil, 30*24*time.Hour, nil)
		},
		"Defer": func() (string, error) { return p.Defer(ctx, "jobs", "t", nil, 30*24*time.Hour, nil) },
	} {
		id, err := call()
		if err == nil || err.Error() != want {
			t.Errorf("%s of 30d = %q, %v; want the error %q", name, id, err, want)
		}
		if !errors.Is(err, ErrDelayTooLong) {
			t.Errorf("%s of 30d: errors.Is(err, ErrDelayTooLong) = false", name)
		}
		var dte *topology.DelayTooLongError
		if !errors.As(err, &dte) || dte.Delay != 30*24*time.Hour {
			t.Errorf("%s of 30d: want a *topology.DelayTooLongError for 30d, got %#v", name, err)
		}
	}
	// The longest delay that fits is accepted.
	if _, err := p.EnqueueAfter(ctx, "jobs", "t", nil, 2147483*time.Second, nil); err != nil {
		t.Errorf("EnqueueAfter of exactly the ceiling: %v", err)
	}

	ch := b.channel()
	if n := b.count(ch, b.name("jobs")); n != 0 {
		t.Errorf("work queue holds %d messages after refused delays", n)
	}
	got := b.queueNames()
	slices.Sort(got)
	want2 := []string{b.name("jobs"), b.name("jobs.dead"), b.name("jobs.deferred.2147483000")}
	if !slices.Equal(got, want2) {
		t.Errorf("queues = %v, want %v: a refused delay must not declare a hold queue", got, want2)
	}
}

func TestIntegrationUndeclaredProducerCannotDelay(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	newTestProducer(t, b, []QueueConfig{{Name: "jobs"}}, nil) // the queues exist, owned by someone else
	ctx := testCtx(t)

	p, err := NewUndeclaredProducer(ctx, b.url, b.prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if _, err := p.EnqueueAfter(ctx, "jobs", "t", nil, time.Second, nil); !errors.Is(err, ErrUnknownQueue) {
		t.Errorf("undeclared EnqueueAfter = %v, want ErrUnknownQueue", err)
	}
	if _, err := p.Defer(ctx, "jobs", "t", nil, time.Second, nil); !errors.Is(err, ErrUnknownQueue) {
		t.Errorf("undeclared Defer = %v, want ErrUnknownQueue", err)
	}
	if _, err := p.Enqueue(ctx, "jobs", "t", nil, nil); err != nil {
		t.Errorf("undeclared Enqueue onto an existing queue: %v", err)
	}

	// Without a prefix, names are broker names.
	raw, err := NewUndeclaredProducer(ctx, b.url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	if _, err := raw.Enqueue(ctx, b.name("jobs"), "t", nil, nil); err != nil {
		t.Errorf("undeclared Enqueue by broker name: %v", err)
	}

	if n := b.count(b.channel(), b.name("jobs")); n != 2 {
		t.Errorf("work queue holds %d jobs, want 2", n)
	}
	got := b.queueNames()
	slices.Sort(got)
	if want := []string{b.name("jobs"), b.name("jobs.dead")}; !slices.Equal(got, want) {
		t.Errorf("queues = %v, want %v: an undeclared producer declares nothing", got, want)
	}
}

func TestIntegrationPublishToMissingQueueIsUnroutable(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	// One channel, so that each publish reuses the one before it: a
	// return must never leak into the next publish's result.
	p := newTestProducer(t, b, []QueueConfig{{Name: "jobs"}}, &ProducerOptions{Channels: 1})
	ctx := testCtx(t)
	for i := range 3 {
		_, err := p.Enqueue(ctx, "missing", "t", i, nil)
		if !errors.Is(err, ErrUnroutable) {
			t.Fatalf("Enqueue onto a missing queue = %v, want ErrUnroutable", err)
		}
		if !strings.Contains(err.Error(), b.name("missing")) {
			t.Errorf("error %q does not name the queue", err)
		}
		if _, err := p.Enqueue(ctx, "jobs", "t", i, nil); err != nil {
			t.Fatalf("Enqueue onto an existing queue after an unroutable one: %v", err)
		}
	}
	if n := b.count(b.channel(), b.name("jobs")); n != 3 {
		t.Errorf("work queue holds %d jobs, want 3", n)
	}

	u, err := NewUndeclaredProducer(ctx, b.url, b.prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	if _, err := u.Enqueue(ctx, "missing", "t", nil, nil); !errors.Is(err, ErrUnroutable) {
		t.Errorf("undeclared Enqueue onto a missing queue = %v, want ErrUnroutable", err)
	}
}

func TestIntegrationPreconditionFailedNamesQueueAndArgument(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		existing map[string]any
		durable  bool
		config   QueueConfig
		argument string
	}{
		{"max-priority", map[string]any{"x-max-priority": 5}, true, QueueConfig{Name: "jobs"}, "x-max-priority"},
		{"no-priority", map[string]any{}, true, QueueConfig{Name: "jobs"}, "x-max-priority"},
		{"message-ttl", map[string]any{"x-max-priority": 10, "x-message-ttl": 1000}, true, QueueConfig{Name: "jobs", MessageTTL: 2 * time.Second}, "x-message-ttl"},
		{"durable", map[string]any{"x-max-priority": 10}, false, QueueConfig{Name: "jobs"}, "durable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newTestBroker(t)
			work := b.name("jobs")
			b.declare(work, tc.durable, tc.existing)
			before := b.queue(work).Arguments

			_, err := NewProducer(testCtx(t), b.url, QueueSet{Prefix: b.prefix, Queues: []QueueConfig{tc.config}}, nil)
			var pe *PreconditionError
			if !errors.As(err, &pe) {
				t.Fatalf("NewProducer = %v, want a *PreconditionError", err)
			}
			if pe.Queue != work || pe.Argument != tc.argument {
				t.Errorf("PreconditionError{Queue: %q, Argument: %q}, want %q and %q", pe.Queue, pe.Argument, work, tc.argument)
			}
			if !errors.Is(err, ErrPreconditionFailed) {
				t.Error("errors.Is(err, ErrPreconditionFailed) = false")
			}
			for _, s := range []string{work, tc.argument, "migrate"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			t.Logf("error: %v", err)
			if after := b.queue(work).Arguments; !reflect.DeepEqual(after, before) {
				t.Errorf("the existing queue changed: %v -> %v", before, after)
			}
		})
	}
}

func TestIntegrationPublishedJobHasEnvelopeHeadersAndProperties(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	p := newTestProducer(t, b, []QueueConfig{{Name: "jobs"}, {Name: "fast", NonDurable: true}}, nil)
	ch := b.channel()
	ctx := testCtx(t)

	type payload struct {
		To      string `json:"to"`
		Retries int    `json:"retries"`
	}
	before := time.Now()
	id, err := p.Enqueue(ctx, "jobs", "send_email", payload{To: "a@example.com", Retries: 2}, &EnqueueOptions{CorrelationID: "req-42"})
	if err != nil {
		t.Fatal(err)
	}
	if !uuidV4.MatchString(id) {
		t.Errorf("job id %q is not a UUID", id)
	}
	d, ok := b.get(ch, b.name("jobs"))
	if !ok {
		t.Fatal("no job in the work queue")
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"MessageId", d.MessageId, id},
		{"Type", d.Type, "send_email"},
		{"ContentType", d.ContentType, "application/json"},
		{"CorrelationId", d.CorrelationId, "req-42"},
		{"DeliveryMode", d.DeliveryMode, amqp.Persistent},
		{"Priority", d.Priority, uint8(0)},
		{"Exchange", d.Exchange, ""},
		{"RoutingKey", d.RoutingKey, b.name("jobs")},
		{"Expiration", d.Expiration, ""},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
	if want := (amqp.Table{"x-deferrals": int64(0), "x-attempt": int64(1)}); !reflect.DeepEqual(d.Headers, want) {
		t.Errorf("headers = %#v, want %#v", d.Headers, want)
	}
	if d.Timestamp.Before(before.Truncate(time.Second)) || d.Timestamp.After(time.Now()) {
		t.Errorf("timestamp %v is not the time of the publish", d.Timestamp)
	}
	var fields map[string]any
	if err := json.Unmarshal(d.Body, &fields); err != nil {
		t.Fatal(err)
	}
	enq, _ := fields["enqueued_at_ms"].(float64)
	if ms := int64(enq); ms < before.UnixMilli() || ms > time.Now().UnixMilli() {
		t.Errorf("enqueued_at_ms = %v, want the time of the enqueue", fields["enqueued_at_ms"])
	}
	delete(fields, "enqueued_at_ms")
	want := map[string]any{
		"job_id": id, "job_type": "send_email", "queue": b.name("jobs"), "attempt": 1.0, "deferrals": 0.0,
		"priority": 0.0, "correlation_id": "req-42", "payload": map[string]any{"to": "a@example.com", "retries": 2.0},
	}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("envelope = %v, want %v", fields, want)
	}

	// No correlation id: none in the properties, none in the envelope. A
	// transient queue gets transient messages.
	if _, err := p.Enqueue(ctx, "fast", "ping", nil, nil); err != nil {
		t.Fatal(err)
	}
	d, ok = b.get(ch, b.name("fast"))
	if !ok {
		t.Fatal("no job in the transient queue")
	}
	if d.CorrelationId != "" || strings.Contains(string(d.Body), "correlation_id") {
		t.Errorf("a job without a correlation id carries one: %q, %s", d.CorrelationId, d.Body)
	}
	if d.DeliveryMode != amqp.Transient {
		t.Errorf("job on a transient queue has delivery mode %d, want transient", d.DeliveryMode)
	}
}

// EnqueueBatch with its chunks one after another (batch order) and with
// the default chunks in flight at once (order within each chunk).
func TestIntegrationEnqueueBatch(t *testing.T) {
	t.Parallel()
	for _, chunks := range []int{1, DefaultBatchChunks} {
		t.Run(fmt.Sprint("chunks=", chunks), func(t *testing.T) {
			t.Parallel()
			testEnqueueBatch(t, chunks)
		})
	}
}

func testEnqueueBatch(t *testing.T, chunks int) {
	b := newTestBroker(t)
	p := newTestProducer(t, b, []QueueConfig{{Name: "a"}, {Name: "b"}}, &ProducerOptions{BatchChunks: chunks})
	ch := b.channel()
	ctx := testCtx(t)

	const n = 301 // more than two chunks
	jobs := make([]BatchJob, n)
	for i := range jobs {
		q := "a"
		if i%2 == 1 {
			q = "b"
		}
		jobs[i] = BatchJob{Queue: q, JobType: "batch", Payload: i, Options: &EnqueueOptions{CorrelationID: fmt.Sprint("batch-", i)}}
	}
	jobs[150].Queue = "missing"

	ids, err := p.EnqueueBatch(ctx, jobs)
	var be *BatchError
	if !errors.As(err, &be) {
		t.Fatalf("EnqueueBatch with one job for a missing queue = %v, want a *BatchError", err)
	}
	if !errors.Is(err, ErrUnroutable) {
		t.Errorf("errors.Is(err, ErrUnroutable) = false for %v", err)
	}
	for i, e := range be.Errs {
		if (i == 150) != (e != nil) {
			t.Errorf("job %d: error %v", i, e)
		}
	}
	if len(ids) != n {
		t.Fatalf("%d ids for %d jobs", len(ids), n)
	}

	var wantA []string
	for i := 0; i < n; i += 2 {
		if i != 150 {
			wantA = append(wantA, ids[i])
		}
	}
	if c := b.count(ch, b.name("b")); c != n/2 {
		t.Errorf("queue b holds %d jobs, want %d", c, n/2)
	}
	var gotA []string
	for {
		d, ok := b.get(ch, b.name("a"))
		if !ok {
			break
		}
		env, err := decodeEnvelope(d.Body)
		if err != nil {
			t.Fatal(err)
		}
		var i int
		_ = json.Unmarshal(env.Payload, &i)
		if d.CorrelationId != fmt.Sprint("batch-", i) || env.CorrelationID != d.CorrelationId {
			t.Errorf("job %d has correlation id %q / %q", i, d.CorrelationId, env.CorrelationID)
		}
		gotA = append(gotA, d.MessageId)
	}
	if chunks == 1 {
		if !slices.Equal(gotA, wantA) {
			t.Errorf("queue a: %d jobs, want %d in batch order", len(gotA), len(wantA))
		}
	} else {
		// Every job, and each chunk's jobs in batch order.
		chunkOf := map[string]int{}
		for i, id := range ids {
			chunkOf[id] = i / maxChunk
		}
		byChunk := func(ids []string) map[int][]string {
			m := map[int][]string{}
			for _, id := range ids {
				m[chunkOf[id]] = append(m[chunkOf[id]], id)
			}
			return m
		}
		if !reflect.DeepEqual(byChunk(gotA), byChunk(wantA)) {
			t.Errorf("queue a: %d jobs, want %d, each chunk's in batch order", len(gotA), len(wantA))
		}
	}

	if ids, err := p.EnqueueBatch(ctx, nil); err != nil || len(ids) != 0 {
		t.Errorf("empty batch = %v, %v", ids, err)
	}
}

// batchCutShort enqueues a batch of 64 jobs whose context is cancelled as
// soon as the first job's confirm arrives: job 0 onto queue first, the
// others onto rest (logical names). It checks that every job reported
// enqueued is in rest's broker queue, and that the others were given up
// on, and returns job 0's error.
func batchCutShort(t *testing.T, b *testBroker, p *Producer, st *stalls, first, rest string) error {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	st.confirmed = func(k int) {
		if k == 0 {
			cancel()
		}
	}
	jobs := make([]BatchJob, 64)
	jobs[0] = BatchJob{Queue: first, JobType: "t", Payload: 0}
	for i := 1; i < len(jobs); i++ {
		jobs[i] = BatchJob{Queue: rest, JobType: "t", Payload: i}
	}
	ids, err := p.EnqueueBatch(ctx, jobs)
	var be *BatchError
	if !errors.As(err, &be) {
		t.Fatalf("EnqueueBatch = %v, want a *BatchError", err)
	}
	ch := b.channel()
	arrived := map[string]bool{}
	for {
		d, ok := b.get(ch, b.name(rest))
		if !ok {
			break
		}
		arrived[d.MessageId] = true
	}
	confirmed, gaveUp := 0, 0
	for i := 1; i < len(jobs); i++ {
		switch err := be.Errs[i]; {
		case err == nil:
			confirmed++
			if !arrived[ids[i]] {
				t.Errorf("job %d was reported enqueued and is not in %s", i, b.name(rest))
			}
		case strings.Contains(err.Error(), "may or may not have been enqueued") && errors.Is(err, context.Canceled):
			gaveUp++
		default:
			t.Errorf("job %d: %v, want enqueued or given up on", i, err)
		}
	}
	t.Logf("after the cancel: %d jobs confirmed, %d given up on", confirmed, gaveUp)
	if gaveUp == 0 {
		t.Fatal("the batch never gave up waiting for a confirm: the test proves nothing")
	}
	return be.Errs[0]
}

// Regression: when the context ended while a batch waited for its confirms,
// the returns of the jobs already confirmed went unread, so a job the broker
// acked and returned as unroutable was reported enqueued.
func TestIntegrationBatchCutShortStillReadsTheReturnsOfConfirmedJobs(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	st := &stalls{}
	p := newStalledProducer(t, b, []QueueConfig{{Name: "jobs"}}, nil, st)
	err := batchCutShort(t, b, p, st, "missing", "jobs")
	if !errors.Is(err, ErrUnroutable) {
		t.Errorf("job 0, onto a missing queue, = %v, want ErrUnroutable", err)
	}
}

// The same for a diverted job whose migration queue is missing: it is
// neither reported enqueued, nor sent to the work queue after the context
// ended.
func TestIntegrationBatchCutShortStillReadsTheReturnsOfDivertedJobs(t *testing.T) {
	t.Parallel()
	st := &stalls{}
	e := setupStalledDivert(t, &ProducerOptions{UnroutableRetry: -1}, st)
	e.startMigration(false)
	err := batchCutShort(t, e.b, e.p, st, "jobs", "other")
	if !errors.Is(err, ErrUnroutable) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "diverted to") {
		t.Errorf("job 0, diverted to a missing migration queue, = %v, want ErrUnroutable naming the diversion, and the cancellation", err)
	}
	if n := e.b.count(e.ch, e.work); n != 0 {
		t.Errorf("%s holds %d jobs, want none: the context had ended", e.work, n)
	}
}

func TestIntegrationConcurrentEnqueues(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	p := newTestProducer(t, b, []QueueConfig{{Name: "jobs"}}, &ProducerOptions{Channels: 8, DelayGranularity: 10 * time.Second})
	ctx := testCtx(t)

	const goroutines, each = 32, 25
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each*2)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				id, err := p.Enqueue(ctx, "jobs", "t", []int{g, i}, nil)
				if err != nil {
					errs <- err
					continue
				}
				// Many publishes share one in-flight hold-queue
				// declaration at a time.
				if _, err := p.EnqueueAfter(ctx, "jobs", "t", nil, time.Second, nil); err != nil {
					errs <- err
				}
				mu.Lock()
				if seen[id] {
					errs <- fmt.Errorf("job id %s twice", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c := b.count(b.channel(), b.name("jobs")); c != goroutines*each {
		t.Errorf("work queue holds %d jobs, want %d", c, goroutines*each)
	}
	if b.queue(b.name("jobs")+".deferred.10000") == nil {
		t.Error("no hold queue for the delayed jobs")
	}
}

// Regression test for pairing returns with confirms: with few channels and
// many goroutines mixing routable and unroutable publishes, every result
// must belong to its own publish.
func TestIntegrationConcurrentUnroutablePublishesAreAttributedCorrectly(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	p := newTestProducer(t, b, []QueueConfig{{Name: "jobs"}}, &ProducerOptions{Channels: 3})
	ctx := testCtx(t)
	const goroutines, each = 24, 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	routed := 0
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				missing := (g+i)%3 == 0
				q := "jobs"
				if missing {
					q = "missing"
				}
				_, err := p.Enqueue(ctx, q, "t", i, nil)
				switch {
				case missing && !errors.Is(err, ErrUnroutable):
					t.Errorf("publish to a missing queue = %v, want ErrUnroutable", err)
				case !missing && err != nil:
					t.Errorf("publish to an existing queue = %v", err)
				case !missing:
					mu.Lock()
					routed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if c := b.count(b.channel(), b.name("jobs")); c != routed {
		t.Errorf("work queue holds %d jobs, want %d", c, routed)
	}
}

func TestIntegrationRefusedHoldDeclarationFailsOnlyThatPublish(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	p := newTestProducer(t, b, []QueueConfig{{Name: "jobs"}}, nil)
	ctx := testCtx(t)
	work := b.name("jobs")
	bad := work + ".deferred.1000"
	b.declare(bad, true, map[string]any{}) // made by hand, without the hold arguments

	for range 2 { // the second time on a reopened declaration channel
		_, err := p.EnqueueAfter(ctx, "jobs", "t", nil, time.Second, nil)
		var pe *PreconditionError
		if !errors.As(err, &pe) || pe.Queue != bad || pe.Argument == "" {
			t.Fatalf("EnqueueAfter onto a hand-made hold queue = %v, want a *PreconditionError naming %s and an argument", err, bad)
		}
		if !strings.Contains(err.Error(), "delete this one") {
			t.Errorf("error %q does not say how to fix a hold queue", err)
		}
	}
	if _, err := p.Enqueue(ctx, "jobs", "t", nil, nil); err != nil {
		t.Errorf("Enqueue after a refused hold declaration: %v", err)
	}
	if _, err := p.EnqueueAfter(ctx, "jobs", "t", nil, 2*time.Second, nil); err != nil {
		t.Errorf("EnqueueAfter onto another hold queue after a refused declaration: %v", err)
	}
	if b.queue(work+".deferred.2000") == nil {
		t.Error("hold queue .deferred.2000 missing")
	}
}

func TestIntegrationProducerReconnectsAndRedeclares(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	connName := b.prefix + "-conn"
	p := newTestProducer(t, b, []QueueConfig{{Name: "jobs"}}, &ProducerOptions{
		AMQPConfig: &amqp.Config{Properties: amqp.Table{"connection_name": connName}},
	})
	ctx := testCtx(t)
	work := b.name("jobs")
	if _, err := p.Enqueue(ctx, "jobs", "t", 1, nil); err != nil {
		t.Fatal(err)
	}
	var broker string // the broker's name for the connection
	eventually(t, 20*time.Second, 200*time.Millisecond, "the producer's connection never showed in the management API", func() bool {
		conns, err := b.api.ListConnections()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range conns {
			if c.ClientProperties["connection_name"] == connName {
				broker = c.Name
				return true
			}
		}
		return false
	})
	// While the connection is down, the work queue goes away; the
	// reconnect must declare it again.
	if _, err := b.api.DeleteQueue(b.vhost, work); err != nil {
		t.Fatal(err)
	}
	if _, err := b.api.CloseConnection(broker); err != nil {
		t.Fatalf("close the producer's connection: %v", err)
	}

	id, err := p.Enqueue(ctx, "jobs", "t", 2, nil)
	if err != nil {
		t.Fatalf("Enqueue after the connection was closed: %v", err)
	}
	// The reconnect shows as a new connection of the same name.
	eventually(t, 20*time.Second, 200*time.Millisecond, "the producer never reconnected: no new connection in the management API", func() bool {
		conns, err := b.api.ListConnections()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range conns {
			if c.ClientProperties["connection_name"] == connName && c.Name != broker {
				return true
			}
		}
		return false
	})
	checkQueue(t, b, work, true, map[string]any{"x-max-priority": 10.0})
	d, ok := b.get(b.channel(), work)
	if !ok || d.MessageId != id {
		t.Errorf("after the reconnect the work queue holds %v (ok %v), want job %s", d.MessageId, ok, id)
	}
	if _, err := p.EnqueueAfter(ctx, "jobs", "t", 3, time.Second, nil); err != nil {
		t.Errorf("EnqueueAfter after the reconnect: %v", err)
	}
}

func TestIntegrationCloseWaitsForPublishesInFlight(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	p := newTestProducer(t, b, []QueueConfig{{Name: "jobs"}}, nil)
	ctx := testCtx(t)

	var wg sync.WaitGroup
	var mu sync.Mutex
	confirmed := 0
	for range 50 {
		wg.Go(func() {
			_, err := p.Enqueue(ctx, "jobs", "t", nil, nil)
			switch {
			case err == nil:
				mu.Lock()
				confirmed++
				mu.Unlock()
			case !errors.Is(err, ErrClosed):
				t.Errorf("Enqueue during Close: %v", err)
			}
		})
	}
	time.Sleep(time.Millisecond)
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
	if _, err := p.Enqueue(ctx, "jobs", "t", nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Enqueue after Close = %v, want ErrClosed", err)
	}
	if _, err := p.EnqueueAfter(ctx, "jobs", "t", nil, time.Second, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("EnqueueAfter after Close = %v, want ErrClosed", err)
	}
	if c := b.count(b.channel(), b.name("jobs")); c != confirmed {
		t.Errorf("work queue holds %d jobs, %d were confirmed", c, confirmed)
	}
	t.Logf("%d of 50 enqueues were confirmed before Close", confirmed)
}

func TestIntegrationProducerFromConnection(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	ac, err := amqp.Dial(b.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ac.Close() })
	ctx := testCtx(t)
	p, err := NewProducerFromConnection(ctx, ac, QueueSet{Prefix: b.prefix, Queues: []QueueConfig{{Name: "jobs"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.EnqueueAfter(ctx, "jobs", "t", nil, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if ac.IsClosed() {
		t.Error("Close closed the caller's connection")
	}
	checkQueue(t, b, b.name("jobs"), true, map[string]any{"x-max-priority": 10.0})
}

// Pipelined publishes on one real channel: 64 callers share it, a third of
// them to a queue that does not exist. Every caller gets its own job's
// outcome (the returns of the missing queue's jobs are never taken for an
// enqueued job's), and the queue holds exactly the jobs whose Enqueue
// succeeded, once each.
func TestIntegrationProducerPipelinesOnOneChannel(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	p := newTestProducer(t, b, []QueueConfig{{Name: "jobs"}}, &ProducerOptions{Channels: 1, PublishesPerChannel: 64})
	ctx := testCtx(t)
	const callers, each = 64, 30
	var mu sync.Mutex
	enqueued := map[string]bool{}
	var wrong []string
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				queue := "jobs"
				if (c+i)%3 == 0 {
					queue = "missing"
				}
				id, err := p.Enqueue(ctx, queue, "pipelined", map[string]int{"c": c, "i": i}, nil)
				mu.Lock()
				switch {
				case queue == "jobs" && err == nil:
					enqueued[id] = true
				case queue == "missing" && errors.Is(err, ErrUnroutable):
				default:
					wrong = append(wrong, fmt.Sprintf("%s: %s, %v", queue, id, err))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(wrong) > 0 {
		t.Fatalf("%d enqueues got another's outcome, e.g. %s", len(wrong), wrong[0])
	}
	ch := b.channel()
	seen := map[string]int{}
	for {
		d, ok := b.get(ch, b.name("jobs"))
		if !ok {
			break
		}
		seen[d.MessageId]++
	}
	for id := range enqueued {
		if seen[id] != 1 {
			t.Errorf("job %s enqueued, found %d times in the queue", id, seen[id])
		}
	}
	if len(seen) != len(enqueued) {
		t.Errorf("%d distinct jobs in the queue, %d enqueued", len(seen), len(enqueued))
	}
	if want := callers * each * 2 / 3; len(enqueued) != want {
		t.Errorf("%d jobs enqueued, want %d", len(enqueued), want)
	}
}
