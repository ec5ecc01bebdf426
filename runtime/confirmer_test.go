package queuey

// The confirmer over a fake confirm-mode channel: how confirms, returns, a
// closed channel and an ended context become fates.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// fakeChannel answers each publish by answer(rk): ack, nack, return (the
// return is handed to the listener before the ack, as amqp091-go does),
// pending (never confirmed) or fail (the publish itself fails).
type fakeChannel struct {
	closed  atomic.Bool
	closes  atomic.Int32 // Close runs on a goroutine of its own (discard)
	returns chan amqp.Return
	answer  func(rk string) string

	mu sync.Mutex
	// waiting are the confirms of the pending publishes, for settle.
	waiting []*fakeConfirmation
	// overflow counts the returns the listener had no room for, which
	// amqp091-go would drop.
	overflow atomic.Int32
}

// settle acks the pending publishes, and reports how many there were.
func (c *fakeChannel) settle() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.waiting {
		f.acked = true
		close(f.done)
	}
	n := len(c.waiting)
	c.waiting = nil
	return n
}

// unsettled is how many publishes wait for their confirms.
func (c *fakeChannel) unsettled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

type fakeConfirmation struct {
	done  chan struct{}
	acked bool
}

func (f *fakeConfirmation) WaitContext(ctx context.Context) (bool, error) {
	select {
	case <-f.done:
		return f.acked, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}
func (f *fakeConfirmation) Done() <-chan struct{} { return f.done }
func (f *fakeConfirmation) Acked() bool           { return f.acked }

var (
	errPublishFailed = errors.New("publish failed")
	errSocketReset   = &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ECONNRESET)}
)

func (c *fakeChannel) publish(_ context.Context, rk string, msg amqp.Publishing) (confirmation, error) {
	conf := &fakeConfirmation{done: make(chan struct{})}
	switch c.answer(rk) {
	case "fail":
		return nil, errPublishFailed
	case "reset":
		// The broker reset the socket: amqp091-go returns the write's
		// error and the channel still looks open.
		return nil, errSocketReset
	case "pending":
		c.mu.Lock()
		c.waiting = append(c.waiting, conf)
		c.mu.Unlock()
		return conf, nil
	case "return":
		select {
		case c.returns <- amqp.Return{RoutingKey: rk, MessageId: msg.MessageId, ReplyCode: 312, ReplyText: "NO_ROUTE"}:
		default:
			c.overflow.Add(1)
		}
		conf.acked = true
	case "ack":
		conf.acked = true
	case "closed":
		c.closed.Store(true)
	}
	close(conf.done)
	return conf, nil
}
func (c *fakeChannel) IsClosed() bool { return c.closed.Load() }
func (c *fakeChannel) Close() error   { c.closes.Add(1); c.closed.Store(true); return nil }

// closedSoon reports whether c was closed once within a second: discard
// closes a channel in the background, so as not to wait for a broker that
// blocks the connection.
func closedSoon(c *fakeChannel) bool {
	for range 100 {
		if c.closes.Load() == 1 {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// fakeChannelConfirmer is a channelConfirmer whose channels are fakes
// answering by answer; it returns the channels it opened.
func fakeChannelConfirmer(answer func(rk string) string) (*channelConfirmer, *[]*fakeChannel) {
	var opened []*fakeChannel
	return &channelConfirmer{dial: func(context.Context) (confirmChannel, <-chan amqp.Return, error) {
		ch := &fakeChannel{returns: make(chan amqp.Return, maxInFlight), answer: answer}
		opened = append(opened, ch)
		return ch, ch.returns, nil
	}}, &opened
}

// byName answers a publish by its routing key, less a trailing digit.
func byName(rk string) string { return strings.TrimRight(rk, "0123456789") }

func kinds(fates []fate) []fateKind {
	out := make([]fateKind, len(fates))
	for i, f := range fates {
		out[i] = f.kind
	}
	return out
}

func wantKinds(t *testing.T, fates []fate, want ...fateKind) {
	t.Helper()
	got := kinds(fates)
	if len(got) != len(want) {
		t.Fatalf("fates %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("fate %d: %d, want %d (all: %v)", i, got[i], want[i], got)
		}
	}
}

func group(rks ...string) []outbound {
	out := make([]outbound, len(rks))
	for i, rk := range rks {
		out[i] = outbound{rk: rk, msg: amqp.Publishing{MessageId: rk + "-id"}}
	}
	return out
}

// Confirms and returns of one group, matched by MessageId: a return is
// final though its ack came after it.
func TestConfirmerReportsAckNackAndReturn(t *testing.T) {
	t.Parallel()
	c, _ := fakeChannelConfirmer(byName)
	if err := c.open(t.Context()); err != nil {
		t.Fatal(err)
	}
	fates := c.publish(t.Context(), group("ack", "return", "nack", "ack2"))
	wantKinds(t, fates, acked, returned, nacked, acked)
	if fates[0].at.IsZero() {
		t.Error("an ack without its time")
	}
	if r := fates[1].ret; r.ReplyCode != 312 || r.ReplyText != "NO_ROUTE" {
		t.Errorf("return %+v", r)
	}

	// One message: its return is its own, whatever its MessageId.
	single := []outbound{{rk: "return"}}
	wantKinds(t, c.publish(t.Context(), single), returned)
}

// A confirm settled by the channel's closing (amqp091-go makes it a nack)
// is lost, not nacked; a publish that fails leaves it and the rest unsent;
// on a channel thrown away nothing is sent.
func TestConfirmerReportsLostAndNotSent(t *testing.T) {
	t.Parallel()
	c, opened := fakeChannelConfirmer(byName)
	if err := c.open(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantKinds(t, c.publish(t.Context(), group("ack", "closed")), acked, lost)
	if err := c.open(t.Context()); err != nil || len(*opened) != 2 || !closedSoon((*opened)[0]) {
		t.Fatalf("open after a closed channel: %v, %d opened; want the old one closed and a new one", err, len(*opened))
	}
	if err := c.open(t.Context()); err != nil || len(*opened) != 2 {
		t.Errorf("open of a live channel: %v, %d opened; want it kept", err, len(*opened))
	}

	fates := c.publish(t.Context(), group("ack", "fail", "ack2"))
	wantKinds(t, fates, acked, notSent, notSent)
	if !errors.Is(fates[1].err, errPublishFailed) || !errors.Is(fates[2].err, errPublishFailed) {
		t.Errorf("not sent for %v, %v; want the publish's error", fates[1].err, fates[2].err)
	}

	c.discard()
	fates = c.publish(t.Context(), group("ack"))
	wantKinds(t, fates, notSent)
	if !errors.Is(fates[0].err, amqp.ErrClosed) {
		t.Errorf("not sent on a discarded channel for %v, want ErrClosed", fates[0].err)
	}
}

// A publish that fails because the broker reset the socket leaves the
// channel broken though amqp091-go does not yet say it is closed: the next
// open opens another, where before it kept the channel and every send
// failed the same way at once (a node stopped under 8 producers in the
// cluster test: three tries in a few microseconds, and the enqueue of an
// immediate job into a quorum queue failed with the reset). A publish that
// fails for another reason keeps the channel.
func TestConfirmerOpensAnotherChannelAfterAReset(t *testing.T) {
	t.Parallel()
	c, opened := fakeChannelConfirmer(byName)
	if err := c.open(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantKinds(t, c.publish(t.Context(), group("ack", "fail")), acked, notSent)
	if err := c.open(t.Context()); err != nil || len(*opened) != 1 {
		t.Fatalf("open after a failed publish: %v, %d opened; want the channel kept", err, len(*opened))
	}
	fates := c.publish(t.Context(), group("reset", "ack"))
	wantKinds(t, fates, notSent, notSent)
	if !errors.Is(fates[0].err, syscall.ECONNRESET) {
		t.Errorf("not sent for %v, want the reset", fates[0].err)
	}
	if (*opened)[0].IsClosed() {
		t.Fatal("the fake reports the reset channel closed; the test needs it to look open, as amqp091-go's does")
	}
	if err := c.open(t.Context()); err != nil || len(*opened) != 2 || !closedSoon((*opened)[0]) {
		t.Fatalf("open after a reset: %v, %d opened; want the old channel closed and a new one", err, len(*opened))
	}
	wantKinds(t, c.publish(t.Context(), group("ack")), acked)
}

// The context ends while confirms are due: those that arrived still count,
// returns included, and the others are unconfirmed. The channel is kept for
// the other publishes on it, and the messages given up on keep their keys
// until their confirms arrive, so that a return of theirs can never be
// taken for a later message's: a publish of the same message is not sent
// (busy, to be routed again once the channel releases messages), one of
// another goes out at once.
func TestConfirmerGivesUpWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	c, opened := fakeChannelConfirmer(byName)
	if err := c.open(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	fates := c.publish(ctx, group("pending", "ack", "return", "pending2"))
	// WaitContext may still read the ack that is ready when the context
	// has ended; either way the pending ones are unconfirmed.
	wantKinds(t, fates, unconfirmed, acked, returned, unconfirmed)
	if !errors.Is(fates[0].err, context.Canceled) {
		t.Errorf("unconfirmed for %v, want the cancellation", fates[0].err)
	}
	ch := (*opened)[0]
	if c.gen == nil || ch.closes.Load() != 0 {
		t.Fatal("the channel was closed under the other publishes on it")
	}

	again := c.publish(t.Context(), group("pending"))
	wantKinds(t, again, notSent)
	var busy *busyError
	if !errors.As(again[0].err, &busy) || ch.unsettled() != 2 {
		t.Fatalf("the same message again: %v, %d unsettled; want it held back (busy) until the first is confirmed", again[0].err, ch.unsettled())
	}
	wantKinds(t, c.publish(t.Context(), group("ack3")), acked)

	if n := ch.settle(); n != 2 {
		t.Fatalf("%d publishes settled, want 2", n)
	}
	eventuallyTrue(t, func() bool {
		c.gen.mu.Lock()
		defer c.gen.mu.Unlock()
		return len(c.gen.pending) == 0
	})
	wantKinds(t, c.publish(t.Context(), group("ack")), acked)
}

// Many publishes share one channel: each gets its own fates, though the
// return of one message may be drained by another publish.
func TestConfirmerSharesAChannel(t *testing.T) {
	t.Parallel()
	c, opened := fakeChannelConfirmer(byName)
	if err := c.open(t.Context()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var wrong atomic.Int32
	for w := range 64 {
		wg.Go(func() {
			for i := range 200 {
				rk := "ack"
				if (w+i)%3 == 0 {
					rk = "return"
				}
				o := []outbound{{rk: rk, msg: amqp.Publishing{MessageId: fmt.Sprintf("%d-%d", w, i)}}}
				f := c.publish(t.Context(), o)[0]
				if want := map[string]fateKind{"ack": acked, "return": returned}[rk]; f.kind != want || (f.kind == returned && f.ret.MessageId != o[0].msg.MessageId) {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := wrong.Load(); n != 0 {
		t.Errorf("%d of 12800 publishes got another's fate", n)
	}
	if n := (*opened)[0].overflow.Load(); n != 0 {
		t.Errorf("%d returns found the listener full", n)
	}
}

// A channel carries at most maxInFlight messages: a publish beyond is not
// sent (busy), and goes out once confirms free room.
func TestConfirmerBoundsMessagesInFlight(t *testing.T) {
	t.Parallel()
	c, opened := fakeChannelConfirmer(byName)
	if err := c.open(t.Context()); err != nil {
		t.Fatal(err)
	}
	ch := (*opened)[0]
	chunk := func(p int) []outbound {
		g := make([]outbound, maxChunk)
		for i := range g {
			g[i] = outbound{rk: "pending", msg: amqp.Publishing{MessageId: fmt.Sprintf("%d-%d", p, i)}}
		}
		return g
	}
	const fit = maxInFlight / maxChunk
	results := make(chan []fate, fit)
	for p := range fit {
		go func() { results <- c.publish(t.Context(), chunk(p)) }()
	}
	eventuallyTrue(t, func() bool { return ch.unsettled() == maxInFlight })
	over := c.publish(t.Context(), chunk(fit))
	var busy *busyError
	if !errors.As(over[0].err, &busy) || ch.unsettled() != maxInFlight {
		t.Fatalf("a chunk beyond %d messages in flight: %v, %d in flight; want it not sent (busy)", maxInFlight, over[0].err, ch.unsettled())
	}
	ch.settle()
	for range fit {
		for _, f := range <-results {
			if f.kind != acked {
				t.Fatalf("fate %d, want acked", f.kind)
			}
		}
	}
	select {
	case <-busy.wait:
	case <-time.After(time.Second):
		t.Fatal("the busy publish was not told when room was freed")
	}
	go func() { results <- c.publish(t.Context(), chunk(fit)) }()
	eventuallyTrue(t, func() bool { return ch.unsettled() == maxChunk })
	ch.settle()
	wantKinds(t, (<-results)[:1], acked)
}

// eventuallyTrue waits up to a second for cond.
func eventuallyTrue(t *testing.T, cond func() bool) {
	t.Helper()
	for range 100 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("not within a second")
}

// A channel that cannot be opened is the open's error.
func TestConfirmerOpenFails(t *testing.T) {
	t.Parallel()
	c := &channelConfirmer{dial: func(context.Context) (confirmChannel, <-chan amqp.Return, error) { return nil, nil, ErrClosed }}
	if err := c.open(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("open = %v, want the dial's error", err)
	}
}

// The probe goes through the confirmer: what each fate answers.
func TestProbeSenderAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		f      fate
		answer string
		err    error
		counts bool
	}{
		{fate{kind: returned}, "returned", nil, true},
		{fate{kind: nacked}, "refused", nil, true},
		{fate{kind: acked}, "taken", nil, true},
		{fate{kind: lost}, "", amqp.ErrClosed, true},
		{fate{kind: unconfirmed, err: context.Canceled}, "", context.Canceled, true},
		{fate{kind: notSent, err: errChannelGone}, "", amqp.ErrClosed, false},
	} {
		fc := newFakeConfirmer()
		fc.fate = func(int, outbound) fate { return tc.f }
		var p Producer
		a, err := probeSender{c: fc, sent: &p.probesSent}.SendProbe(t.Context(), "q.migrating.divert")
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("fate %d: %v, want %v", tc.f.kind, err, tc.err)
			}
		} else if err != nil || []string{"returned", "refused", "taken"}[a] != tc.answer {
			t.Errorf("fate %d: answer %d, %v; want %s", tc.f.kind, a, err, tc.answer)
		}
		if got := p.probesSent.Load() == 1; got != tc.counts {
			t.Errorf("fate %d: counted %v, want %v", tc.f.kind, got, tc.counts)
		}
	}
}
