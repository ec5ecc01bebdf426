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
