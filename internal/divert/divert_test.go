package divert_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
)

// The constants are ordered as the protocol needs them.
func TestTimingConstantsAreOrdered(t *testing.T) {
	t.Parallel()
	if !(divert.Recheck <= divert.Usable && divert.Usable < divert.Grace) {
		t.Fatalf("DivertRecheck %v <= DivertUsable %v < DivertGrace %v does not hold: a result reused would be unusable, or a publish sent by a usable one would have no time left to be confirmed", divert.Recheck, divert.Usable, divert.Grace)
	}
}

// TestLateCountsFromTheProbe pins the late-confirm rule: a confirm Grace or
// more after the probe's sending is late.
func TestLateCountsFromTheProbe(t *testing.T) {
	t.Parallel()
	probed := time.Now()
	if divert.Late(probed, probed.Add(divert.Grace-time.Millisecond)) {
		t.Fatal("a confirm just within Grace counted as late")
	}
	if !divert.Late(probed, probed.Add(divert.Grace)) {
		t.Fatal("a confirm Grace after the probe did not count as late")
	}
}

// TestWaitEndsWithItsContext pins that a migration's wait returns the
// context's error when the context ends first, and waits the grace otherwise.
func TestWaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := divert.Wait(ctx, time.Now(), time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with an ended context = %v, want context.Canceled", err)
	}
	start := time.Now()
	if err := divert.Wait(context.Background(), start, 30*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("Wait returned after %v, before its grace of 30ms", d)
	}
	if err := divert.Wait(context.Background(), start.Add(-time.Hour), time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestRepublishingKeepsEveryProperty pins that a moved message is published
// with every property of the delivery it was taken as.
func TestRepublishingKeepsEveryProperty(t *testing.T) {
	t.Parallel()
	ts := time.Unix(1700000000, 0)
	d := amqp.Delivery{
		Headers: amqp.Table{"x-attempt": int64(2)}, ContentType: "application/json", ContentEncoding: "gzip",
		DeliveryMode: amqp.Persistent, Priority: 7, CorrelationId: "c", ReplyTo: "r", Expiration: "60000",
		MessageId: "m", Timestamp: ts, Type: "t", UserId: "guest", AppId: "a", Body: []byte("{}"),
		Redelivered: true, DeliveryTag: 9,
	}
	p := divert.Republishing(d)
	if p.Headers["x-attempt"] != int64(2) || p.ContentType != d.ContentType || p.ContentEncoding != d.ContentEncoding ||
		p.DeliveryMode != d.DeliveryMode || p.Priority != d.Priority || p.CorrelationId != d.CorrelationId ||
		p.ReplyTo != d.ReplyTo || p.Expiration != d.Expiration || p.MessageId != d.MessageId || !p.Timestamp.Equal(ts) ||
		p.Type != d.Type || p.UserId != d.UserId || p.AppId != d.AppId || string(p.Body) != "{}" {
		t.Fatalf("Republishing lost a property: %+v", p)
	}
}

// sender answers every probe with answer, or fails with err.
type sender struct {
	answer divert.Answer
	err    error
	queues []string
}

func (s *sender) SendProbe(_ context.Context, queue string) (divert.Answer, error) {
	s.queues = append(s.queues, queue)
	return s.answer, s.err
}

// What each answer of the broker means, and when the result was taken.
func TestProbeReadsTheAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		answer   divert.Answer
		diverted bool
	}{{divert.Returned, false}, {divert.Refused, true}, {divert.Taken, true}} {
		s := &sender{answer: tc.answer}
		before := time.Now()
		r, err := divert.Probe(t.Context(), s, "q.migrating.divert")
		if err != nil {
			t.Fatal(err)
		}
		if r.Diverted != tc.diverted || r.SentAt.Before(before) || r.SentAt.After(time.Now()) {
			t.Errorf("answer %d: %+v, want diverted %v, sent between %v and now", tc.answer, r, tc.diverted, before)
		}
		if len(s.queues) != 1 || s.queues[0] != "q.migrating.divert" {
			t.Errorf("probes sent to %v, want one to q.migrating.divert", s.queues)
		}
	}
	lost := &sender{err: amqp.ErrClosed}
	if _, err := divert.Probe(t.Context(), lost, "q.migrating.divert"); !errors.Is(err, amqp.ErrClosed) {
		t.Errorf("a probe without an answer = %v, want its error", err)
	}
}

// A result is reused for Recheck and routes a publish for Usable, both from
// the probe's sending.
func TestResultIsFreshForRecheckAndUsableForUsable(t *testing.T) {
	t.Parallel()
	var none *divert.Result
	now := time.Now()
	if none.Fresh(now) || none.Usable(now) {
		t.Error("no result is fresh or usable")
	}
	at := func(ago time.Duration) *divert.Result { return &divert.Result{SentAt: now.Add(-ago)} }
	for _, tc := range []struct {
		ago           time.Duration
		fresh, usable bool
	}{
		{0, true, true},
		{divert.Recheck - time.Millisecond, true, true},
		{divert.Recheck, false, true},
		{divert.Usable - time.Millisecond, false, true},
		{divert.Usable, false, false},
	} {
		if r := at(tc.ago); r.Fresh(now) != tc.fresh || r.Usable(now) != tc.usable {
			t.Errorf("a result %v old: fresh %v, usable %v; want %v, %v", tc.ago, r.Fresh(now), r.Usable(now), tc.fresh, tc.usable)
		}
	}
}

func TestRepublishingDropsTheDeliveryCount(t *testing.T) {
	d := amqp.Delivery{MessageId: "j", Body: []byte("b"), Headers: amqp.Table{"x-delivery-count": int64(19), "x-attempt": int64(2)}}
	msg := divert.Republishing(d)
	if _, ok := msg.Headers["x-delivery-count"]; ok || msg.Headers["x-attempt"] != int64(2) || msg.MessageId != "j" {
		t.Errorf("headers %v: want x-attempt kept and x-delivery-count dropped", msg.Headers)
	}
	if d.Headers["x-delivery-count"] != int64(19) {
		t.Error("Republishing changed the delivery's own headers")
	}
}
