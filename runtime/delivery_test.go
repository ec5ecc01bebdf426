package queuey

// The delivery loop's table (judge), row by row, through a fake confirmer.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
)

// probe names of the fake set's queues.
const (
	divertA = "p.a.migrating.divert"
	migA    = "p.a.migrating"
)

// wantErr fails unless err contains every part (nil: err must be nil).
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if parts == nil {
		if err != nil {
			t.Fatalf("error %v, want none", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want one containing %q", parts)
	}
	for _, part := range parts {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not contain %q", err, part)
		}
	}
}

func wantJobs(t *testing.T, fc *fakeConfirmer, want ...string) {
	t.Helper()
	if got := fc.jobs(); !slices.Equal(got, want) {
		t.Errorf("jobs sent to %v, want %v", got, want)
	}
}

// Row: acked on time, done. The probe comes first, on the same channel.
func TestDeliveryAckedOnTimeIsDone(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer("p.a")
	p := fakeProducer(t, fc, nil, nil)
	wantErr(t, p.publishOne(t.Context(), "p.a", msgID("1")))
	wantJobs(t, fc, "p.a")
	if got := fc.probes(); !slices.Equal(got, []string{divertA}) {
		t.Errorf("probes %v, want one of %s", got, divertA)
	}
	if n := p.probesSent.Load(); n != 1 {
		t.Errorf("%d probes counted, want 1", n)
	}
}

// lateAt acks the job sends of the listed numbers (1-based, counting job
// sends only) a Grace after now, as a stall between the probe and the
// confirm would, and the others by the broker.
func lateAt(fc *fakeConfirmer, late ...int) {
	job := 0
	fc.fate = func(_ int, o outbound) fate {
		if strings.HasSuffix(o.rk, ".divert") {
			return fc.broker(o)
		}
		job++
		if slices.Contains(late, job) {
			return fate{kind: acked, at: time.Now().Add(divert.Grace)}
		}
		return fc.broker(o)
	}
}

// Row: acked a Grace or more after the probe, sent again; the second copy
// counts.
func TestDeliveryAckedLateIsSentAgain(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer("p.a")
	lateAt(fc, 1)
	p := fakeProducer(t, fc, nil, nil)
	wantErr(t, p.publishOne(t.Context(), "p.a", msgID("1")))
	wantJobs(t, fc, "p.a", "p.a")
	if n := p.lateConfirms.Load(); n != 1 {
		t.Errorf("%d late confirms, want 1", n)
	}
}

// Row: acked late on every try: three sends, and the error says the job may
// or may not have been enqueued.
func TestDeliveryAckedLateOnEveryTryFailsSayingItMayBeEnqueued(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer("p.a")
	lateAt(fc, 1, 2, 3)
	p := fakeProducer(t, fc, nil, nil)
	err := p.publishOne(t.Context(), "p.a", msgID("1"))
	wantErr(t, err, `publish to "p.a"`, "may or may not have been enqueued", "after the probe of the divert queue")
	if strings.Contains(err.Error(), "an earlier try") {
		t.Errorf("error %q repeats itself", err)
	}
	wantJobs(t, fc, "p.a", "p.a", "p.a")
}

// A job not routed by a probe (no divert cache: a queue of no set) is never
// late, however late its ack.
func TestDeliveryAckedLateWithoutAProbeIsDone(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer("elsewhere")
	lateAt(fc, 1)
	p := fakeProducer(t, fc, nil, nil)
	wantErr(t, p.publishOne(t.Context(), "elsewhere", msgID("1")))
	wantJobs(t, fc, "elsewhere")
	if len(fc.probes()) != 0 {
		t.Errorf("probes %v for a queue of no set", fc.probes())
	}
}

// Row: late, then nacked on the next try: the error says the first copy may
// be enqueued.
func TestDeliveryFailureAfterALateConfirmSaysTheJobMayBeEnqueued(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer("p.a")
	job := 0
	fc.fate = func(_ int, o outbound) fate {
		if o.rk == divertA {
			return fc.broker(o)
		}
		if job++; job == 1 {
			return fate{kind: acked, at: time.Now().Add(divert.Grace)}
		}
		return fate{kind: nacked}
	}
	p := fakeProducer(t, fc, nil, nil)
	err := p.publishOne(t.Context(), "p.a", msgID("1"))
	if !errors.Is(err, ErrNacked) {
		t.Errorf("error %v, want ErrNacked", err)
	}
	wantErr(t, err, "an earlier try may have enqueued the job all the same", "may or may not have been enqueued")
}

// Row: nacked fails at once.
func TestDeliveryNackedFails(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer()
	fc.refuse["p.a"] = true
	p := fakeProducer(t, fc, nil, nil)
	err := p.publishOne(t.Context(), "p.a", msgID("1"))
	if !errors.Is(err, ErrNacked) {
		t.Errorf("error %v, want ErrNacked", err)
	}
	wantJobs(t, fc, "p.a")
}

// Row: returned while diverted (the migration queue is missing) is sent to
// the queue at once, on the same channel, without another probe; the
// context having ended, it is not, and the error says so.
func TestDeliveryReturnedWhileDivertedIsSentDirect(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer("p.a")
	fc.refuse[divertA] = true
	p := fakeProducer(t, fc, nil, nil)
	wantErr(t, p.publishOne(t.Context(), "p.a", msgID("1")))
	wantJobs(t, fc, migA, "p.a")
	if n := len(fc.probes()); n != 1 {
		t.Errorf("%d probes, want 1", n)
	}

	ctx, cancel := context.WithCancel(t.Context())
	fc2 := newFakeConfirmer("p.a")
	fc2.refuse[divertA] = true
	fc2.fate = func(_ int, o outbound) fate {
		if o.rk == migA {
			cancel()
		}
		return fc2.broker(o)
	}
	p2 := fakeProducer(t, fc2, nil, nil)
	err := p2.publishOne(ctx, "p.a", msgID("1"))
	if !errors.Is(err, ErrUnroutable) || !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want ErrUnroutable and the cancellation", err)
	}
	wantErr(t, err, `publish to "p.a" (diverted to "p.a.migrating" while it is migrated)`, `it was not sent to "p.a" itself`)
	wantJobs(t, fc2, migA)
}

// Row: returned while its queue belongs to the set: it backs off (50 ms
// first), and is sent again once the queue is back; past UnroutableRetry it
// fails.
func TestDeliveryReturnedFromAQueueOfTheSetBacksOff(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer()
	fc.fate = func(n int, o outbound) fate {
		if n == 2 { // the first job send: the queue is absent
			fc.mu.Lock()
			fc.queues["p.a.dead"] = true
			fc.mu.Unlock()
			return fate{kind: returned}
		}
		return fc.broker(o)
	}
	p := fakeProducer(t, fc, nil, nil)
	start := time.Now()
	wantErr(t, p.publishOne(t.Context(), "p.a.dead", msgID("1")))
	if took := time.Since(start); took < unroutableMinBackoff {
		t.Errorf("sent again after %v, before the first backoff", took)
	}
	wantJobs(t, fc, "p.a.dead", "p.a.dead")

	// Never back: 50 ms, then 100 ms would end past 120 ms.
	fc2 := newFakeConfirmer()
	p2 := fakeProducer(t, fc2, nil, &ProducerOptions{Channels: 1, UnroutableRetry: 120 * time.Millisecond})
	err := p2.publishOne(t.Context(), "p.a", msgID("1"))
	if !errors.Is(err, ErrUnroutable) {
		t.Errorf("error %v, want ErrUnroutable", err)
	}
	wantErr(t, err, `publish to "p.a"`, "NO_ROUTE (312): no queue has that name")
	wantJobs(t, fc2, "p.a", "p.a")

	// A context that ends while it backs off ends the retry.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	fc3 := newFakeConfirmer()
	err = fakeProducer(t, fc3, nil, nil).publishOne(ctx, "p.a", msgID("1"))
	if !errors.Is(err, ErrUnroutable) {
		t.Errorf("error %v, want ErrUnroutable", err)
	}
	wantJobs(t, fc3, "p.a")
}

// Row: returned from a queue of no set, or with the retry off, or by an
// undeclared producer: it fails at once.
func TestDeliveryReturnedElsewhereFails(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		queue string
		opts  *ProducerOptions
	}{
		"queue of no set": {"elsewhere", nil},
		"retry off":       {"p.a", &ProducerOptions{Channels: 1, UnroutableRetry: -1}},
	} {
		fc := newFakeConfirmer()
		err := fakeProducer(t, fc, nil, tc.opts).publishOne(t.Context(), tc.queue, msgID("1"))
		if !errors.Is(err, ErrUnroutable) {
			t.Errorf("%s: error %v, want ErrUnroutable", name, err)
		}
		wantJobs(t, fc, tc.queue)
	}
	fc := newFakeConfirmer()
	undeclared := newProducer(nil, nil, "", &ProducerOptions{Channels: 1}, &seams{confirmer: func(confirmer) confirmer { return fc }})
	if err := undeclared.publishOne(t.Context(), "p.a", msgID("1")); !errors.Is(err, ErrUnroutable) {
		t.Errorf("undeclared: error %v, want ErrUnroutable", err)
	}
	wantJobs(t, fc, "p.a")
	if len(fc.probes()) != 0 {
		t.Errorf("an undeclared producer probed %v", fc.probes())
	}
}

// kindsAt gives the n-th job send (from 1) the fate of kinds[n-1], and the
// broker's past the end.
func kindsAt(fc *fakeConfirmer, kinds ...fate) {
	job := 0
	fc.fate = func(_ int, o outbound) fate {
		if strings.HasSuffix(o.rk, ".divert") {
			return fc.broker(o)
		}
		job++
		if job <= len(kinds) {
			f := kinds[job-1]
			if f.kind == acked {
				f.at = time.Now()
			}
			return f
		}
		return fc.broker(o)
	}
}

// Rows: lost with the channel, or not sent, is sent again; on every try
// of a round, the last error is the job's. A round has three tries.
func TestDeliveryLostOrNotSentIsSentAgainThreeTimesAtMost(t *testing.T) {
	t.Parallel()
	lost, unsent := fate{kind: lost}, fate{kind: notSent, err: errChannelGone}
	for _, tc := range []struct {
		name  string
		fates []fate
		sends int
		want  []string // nil: enqueued
		is    error
	}{
		{"lost once", []fate{lost}, 2, nil, nil},
		{"lost always", []fate{lost, lost, lost, lost}, 3, []string{"the channel closed before the broker confirmed the job, which may or may not have been enqueued"}, amqp.ErrClosed},
		{"not sent always", []fate{unsent, unsent, unsent, unsent}, 3, []string{"the channel closed before the job was sent"}, amqp.ErrClosed},
		{"lost, then not sent", []fate{lost, unsent, unsent}, 3, []string{"the channel closed before the job was sent", "an earlier try may have enqueued the job all the same"}, amqp.ErrClosed},
	} {
		fc := newFakeConfirmer("p.a")
		kindsAt(fc, tc.fates...)
		err := fakeProducer(t, fc, nil, nil).publishOne(t.Context(), "p.a", msgID("1"))
		if tc.want == nil {
			wantErr(t, err)
		} else {
			wantErr(t, err, tc.want...)
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.is)
		}
		if n := len(fc.jobs()); n != tc.sends {
			t.Errorf("%s: %d sends, want %d", tc.name, n, tc.sends)
		}
	}
}

// Row: the context ended while the confirm was due: no resend, and the
// error says the job may or may not have been enqueued.
func TestDeliveryUnconfirmedFailsWithoutResend(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer("p.a")
	kindsAt(fc, fate{kind: unconfirmed, err: context.Canceled})
	err := fakeProducer(t, fc, nil, nil).publishOne(t.Context(), "p.a", msgID("1"))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want the cancellation", err)
	}
	wantErr(t, err, "gave up waiting for the broker's confirm; the job may or may not have been enqueued")
	wantJobs(t, fc, "p.a")
}

// Rows before a send: a channel that cannot be opened, or a pool that
// cannot be had, fails the job without a send.
func TestDeliveryWithoutAChannelFails(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer("p.a")
	fc.openErr = ErrClosed
	err := fakeProducer(t, fc, nil, nil).publishOne(t.Context(), "p.a", msgID("1"))
	if !errors.Is(err, ErrClosed) {
		t.Errorf("error %v, want ErrClosed", err)
	}
	wantErr(t, err, `queuey: publish to "p.a"`)
	wantJobs(t, fc)

	fc2 := newFakeConfirmer("p.a")
	p := fakeProducer(t, fc2, nil, nil)
	for range cap(p.pool) { // every turn on every channel taken
		defer p.release(<-p.pool)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if err := p.publishOne(ctx, "p.a", msgID("1")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v, want the deadline", err)
	}
	wantJobs(t, fc2)
}

// Rows of route: a probe lost with its channel is sent once more on a
// channel opened again; lost twice, the job is sent again on the next try,
// and after three tries fails with the probe's error. Another probe
// failure fails the job at once.
func TestDeliveryProbeFailures(t *testing.T) {
	t.Parallel()
	probeFails := func(fc *fakeConfirmer, times int, f fate) {
		probes := 0
		fc.fate = func(_ int, o outbound) fate {
			if o.rk == divertA {
				if probes++; probes <= times {
					return f
				}
			}
			return fc.broker(o)
		}
	}
	lost := fate{kind: lost}
	fc := newFakeConfirmer("p.a")
	probeFails(fc, 3, lost) // the first try's two, and one of the second's
	wantErr(t, fakeProducer(t, fc, nil, nil).publishOne(t.Context(), "p.a", msgID("1")))
	wantJobs(t, fc, "p.a")
	if n := len(fc.probes()); n != 4 {
		t.Errorf("%d probes, want 4", n)
	}
	if fc.opens < 4 {
		t.Errorf("%d opens, want one before every probe", fc.opens)
	}

	fc2 := newFakeConfirmer("p.a")
	probeFails(fc2, 6, lost)
	err := fakeProducer(t, fc2, nil, nil).publishOne(t.Context(), "p.a", msgID("1"))
	if !errors.Is(err, amqp.ErrClosed) {
		t.Errorf("error %v, want ErrClosed", err)
	}
	wantErr(t, err, `probe for its divert queue "p.a.migrating.divert"`)
	wantJobs(t, fc2)

	fc3 := newFakeConfirmer("p.a")
	probeFails(fc3, 1, fate{kind: unconfirmed, err: context.DeadlineExceeded})
	err = fakeProducer(t, fc3, nil, nil).publishOne(t.Context(), "p.a", msgID("1"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v, want the probe's", err)
	}
	wantJobs(t, fc3)
}

// Probes answered after Recheck still route a publish while the result is
// usable; answered after Usable, three times, they fail it, and nothing is
// sent.
func TestDeliveryProbesAnsweredLate(t *testing.T) {
	t.Parallel()
	slowProbes := func(fc *fakeConfirmer, d time.Duration) {
		fc.fate = func(_ int, o outbound) fate {
			if strings.HasSuffix(o.rk, ".divert") {
				time.Sleep(d)
			}
			return fc.broker(o)
		}
	}
	t.Run("usable", func(t *testing.T) {
		t.Parallel()
		fc := newFakeConfirmer("p.a")
		slowProbes(fc, divert.Recheck+50*time.Millisecond)
		wantErr(t, fakeProducer(t, fc, nil, nil).publishOne(t.Context(), "p.a", msgID("1")))
		wantJobs(t, fc, "p.a")
	})
	t.Run("too late", func(t *testing.T) {
		t.Parallel()
		fc := newFakeConfirmer("p.a")
		slowProbes(fc, divert.Usable+20*time.Millisecond)
		err := fakeProducer(t, fc, nil, nil).publishOne(t.Context(), "p.a", msgID("1"))
		wantErr(t, err, "3 probes of its divert queue", "too late to trust")
		wantJobs(t, fc)
	})
	// One queue's probe outlasts the other's result: routed again, and
	// after three rounds the diverted jobs of the batch fail; the others go.
	t.Run("batch", func(t *testing.T) {
		t.Parallel()
		fc := newFakeConfirmer("p.a", "p.b", "elsewhere")
		slowProbes(fc, divert.Usable*3/5)
		p := fakeProducer(t, fc, nil, nil)
		ds := []*delivery{p.deliveryTo("p.a", msgID("1")), p.deliveryTo("p.b", msgID("2")), p.deliveryTo("elsewhere", msgID("3"))}
		p.deliver(t.Context(), ds)
		wantErr(t, ds[0].err, "the probes of the divert queues of this batch took longer than")
		wantErr(t, ds[1].err, "the probes of the divert queues of this batch took longer than")
		wantErr(t, ds[2].err)
		wantJobs(t, fc, "elsewhere")
	})
}

// A batch goes out in one group, in order, diverted and not, and each job
// gets its own outcome.
func TestDeliveryBatch(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer("p.a", migA, "p.b")
	fc.refuse[divertA] = true
	fc.refuse["p.b"] = true
	p := fakeProducer(t, fc, nil, nil)
	var jobs []BatchJob
	for i := range 5 {
		jobs = append(jobs, BatchJob{Queue: []string{"a", "b"}[i%2], JobType: "t", Payload: i})
	}
	ids, err := p.EnqueueBatch(t.Context(), jobs)
	var be *BatchError
	if !errors.As(err, &be) || len(ids) != 5 {
		t.Fatalf("EnqueueBatch = %v, %v; want a *BatchError for the jobs of p.b", ids, err)
	}
	for i, e := range be.Errs {
		if (i%2 == 1) != errors.Is(e, ErrNacked) {
			t.Errorf("job %d: %v", i, e)
		}
	}
	wantJobs(t, fc, migA, "p.b", migA, "p.b", migA)
}

// A chunk of a batch is at most maxChunk jobs on one channel.
func TestDeliveryBatchGoesInChunks(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer("p.a")
	calls := 0
	p := fakeProducer(t, fc, nil, &ProducerOptions{Channels: 1})
	jobs := make([]BatchJob, maxChunk+3)
	for i := range jobs {
		jobs[i] = BatchJob{Queue: "a", JobType: "t", Payload: i}
	}
	wrap := &countingConfirmer{confirmer: fc, groups: &calls}
	p.pool = make(chan confirmer, 1)
	p.pool <- wrap
	if _, err := p.EnqueueBatch(t.Context(), jobs); err != nil {
		t.Fatal(err)
	}
	// One probe, then two chunks (the second within Recheck).
	if calls != 3 {
		t.Errorf("%d publishes, want a probe and 2 chunks", calls)
	}
	if n := len(fc.jobs()); n != len(jobs) {
		t.Errorf("%d jobs sent, want %d", n, len(jobs))
	}
}

// A batch's chunks are in flight together, BatchChunks at once, each on a
// channel of its own.
func TestDeliveryBatchChunksInFlightTogether(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer("p.a")
	const chunks = 3
	p := fakeProducer(t, fc, nil, &ProducerOptions{Channels: chunks, BatchChunks: chunks})
	g := &gatheringConfirmers{want: chunks, all: make(chan struct{}), seen: map[confirmer]bool{}}
	p.pool = make(chan confirmer, chunks)
	for range chunks {
		p.pool <- &gatheringConfirmer{confirmer: fc, g: g}
	}
	jobs := make([]BatchJob, 2*chunks*maxChunk)
	for i := range jobs {
		jobs[i] = BatchJob{Queue: "a", JobType: "t", Payload: i}
	}
	if _, err := p.EnqueueBatch(t.Context(), jobs); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.peak != chunks || len(g.seen) != chunks {
		t.Errorf("at most %d chunks were in flight at once, on %d channels; want %d on %d", g.peak, len(g.seen), chunks, chunks)
	}
	if n := len(fc.jobs()); n != len(jobs) {
		t.Errorf("%d jobs sent, want %d", n, len(jobs))
	}
}

// gatheringConfirmers holds each chunk's publish until want of them have
// been in flight at once (or 200 ms have passed, when they never are), and
// counts the most that were.
type gatheringConfirmers struct {
	mu        sync.Mutex
	want, now int
	peak      int
	all       chan struct{}
	closed    bool
	seen      map[confirmer]bool
}

type gatheringConfirmer struct {
	confirmer
	g *gatheringConfirmers
}

func (c *gatheringConfirmer) publish(ctx context.Context, group []outbound) []fate {
	g := c.g
	if len(group) > 1 { // a chunk, not a divert probe
		g.mu.Lock()
		g.now++
		g.peak = max(g.peak, g.now)
		g.seen[c] = true
		if g.now == g.want && !g.closed {
			close(g.all)
			g.closed = true
		}
		g.mu.Unlock()
		select {
		case <-g.all:
		case <-time.After(200 * time.Millisecond):
		}
		defer func() { g.mu.Lock(); g.now--; g.mu.Unlock() }()
	}
	return c.confirmer.publish(ctx, group)
}

type countingConfirmer struct {
	confirmer
	groups *int
}

func (c *countingConfirmer) publish(ctx context.Context, group []outbound) []fate {
	*c.groups++
	return c.confirmer.publish(ctx, group)
}

// Dead letters are diverted like jobs: their queue's divert queue is
// probed, and while it exists they go into its migration queue.
func TestDeliveryDivertsDeadLetters(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer("p.a.dead.migrating")
	fc.refuse["p.a.dead.migrating.divert"] = true
	p := fakeProducer(t, fc, nil, nil)
	wantErr(t, p.publishRaw(t.Context(), "p.a.dead", msgID("1")))
	wantJobs(t, fc, "p.a.dead.migrating")
	if got := fc.probes(); !slices.Equal(got, []string{"p.a.dead.migrating.divert"}) {
		t.Errorf("probes %v, want one of p.a.dead's divert queue", got)
	}
}

// The late log names the queue and counts the jobs.
func TestDeliveryLateConfirmsAreCountedPerJob(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer("p.a", "p.b")
	lateAt(fc, 1, 2)
	p := fakeProducer(t, fc, nil, nil)
	ds := []*delivery{p.deliveryTo("p.a", msgID("1")), p.deliveryTo("p.b", msgID("2"))}
	p.deliver(t.Context(), ds)
	for i, d := range ds {
		if d.err != nil {
			t.Errorf("job %d: %v", i, d.err)
		}
	}
	if n := p.lateConfirms.Load(); n != 2 {
		t.Errorf("%d late confirms, want 2", n)
	}
	wantJobs(t, fc, "p.a", "p.b", "p.a", "p.b")
}

// Concurrent publishes share a channel: with one channel and eight turns on
// it, eight publishes wait for their confirms on it at once. With one turn
// (PublishesPerChannel 1) the second would wait for the first's confirm.
func TestDeliverySharesAChannel(t *testing.T) {
	t.Parallel()
	const turns = 8
	fc := newFakeConfirmer("p.a")
	var mu sync.Mutex
	waiting := 0
	all := make(chan struct{})
	fc.fate = func(_ int, o outbound) fate {
		if o.rk != "p.a" {
			return fc.broker(o) // a probe
		}
		mu.Lock()
		if waiting++; waiting == turns {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return fate{kind: acked, at: time.Now()}
		case <-time.After(5 * time.Second):
			return fate{kind: unconfirmed, err: context.DeadlineExceeded}
		}
	}
	p := fakeProducer(t, fc, nil, &ProducerOptions{Channels: 1, PublishesPerChannel: turns})
	var wg sync.WaitGroup
	errs := make([]error, turns)
	for i := range turns {
		wg.Go(func() { errs[i] = p.publishOne(t.Context(), "p.a", msgID(fmt.Sprint(i))) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("publish %d: %v; want all %d confirmed together on the one channel", i, err, turns)
		}
	}
}

// Row: not sent because the channel was busy (no room, or the same id in
// flight): not a try. Four busy answers in a row, more than a round's
// tries, then a send lost with its channel, and the job is still sent
// again, routed afresh each time; a context that
// ends while it waits fails it, saying so.
func TestDeliveryBusyChannelIsNotATry(t *testing.T) {
	t.Parallel()
	free := make(chan struct{})
	close(free)
	fc := newFakeConfirmer("p.a")
	busy := 0
	fc.fate = func(_ int, o outbound) fate {
		if o.rk != "p.a" {
			return fc.broker(o)
		}
		busy++
		switch {
		case busy <= maxPublishTries+1:
			return fate{kind: notSent, err: &busyError{why: "test", wait: free}}
		case busy == maxPublishTries+2:
			return fate{kind: lost} // a try, the round's first
		}
		return fate{kind: acked, at: time.Now()}
	}
	err := fakeProducer(t, fc, nil, nil).publishOne(t.Context(), "p.a", msgID("1"))
	wantErr(t, err)
	wantJobs(t, fc, "p.a", "p.a", "p.a", "p.a", "p.a", "p.a")

	never := make(chan struct{})
	fc2 := newFakeConfirmer("p.a")
	fc2.fate = func(_ int, o outbound) fate {
		if o.rk != "p.a" {
			return fc2.broker(o)
		}
		return fate{kind: notSent, err: &busyError{why: "test", wait: never}}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	err = fakeProducer(t, fc2, nil, nil).publishOne(ctx, "p.a", msgID("1"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v, want the deadline", err)
	}
	wantErr(t, err, "gave up waiting for a turn")
}
