package queuey

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
)

// Within Recheck of a probe, route decides from the cache alone: only
// direct publishes to a work or dead-letter queue of the set are diverted.
func TestRouteGoesByAFreshResultWithoutProbing(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer()
	p := fakeProducer(t, fc, nil, nil)
	p.diverts["p.a"].last.Store(&divert.Result{SentAt: time.Now(), Diverted: true})
	p.diverts["p.b"].last.Store(&divert.Result{SentAt: time.Now(), Diverted: false})
	p.diverts["p.a.dead"].last.Store(&divert.Result{SentAt: time.Now(), Diverted: true})

	var msg amqp.Publishing
	send := []*delivery{
		p.deliveryTo("p.a", msg),
		p.deliveryTo("p.b", msg),
		p.deliveryTo("p.a.dead", msg),
		{key: "p.a.deferred.1000", msg: msg, hold: &heldState{}}, // as publishHeld builds it
		p.deliveryTo("p.a", msg),
		p.deliveryTo("elsewhere", msg),
	}
	routed := p.route(t.Context(), fc, send)
	if len(routed) != len(send) {
		t.Fatalf("routed %d of %d", len(routed), len(send))
	}
	for i, want := range []string{migA, "p.b", "p.a.dead.migrating", "p.a.deferred.1000", migA, "elsewhere"} {
		if send[i].rk != want {
			t.Errorf("message %d to %s: routing key %q, want %q", i, send[i].key, send[i].rk, want)
		}
	}
	if got, want := send[0].target(), `"p.a" (diverted to "p.a.migrating" while it is migrated)`; got != want {
		t.Errorf("target of a diverted message = %s, want %s", got, want)
	}
	if got, want := send[1].target(), `"p.b"`; got != want {
		t.Errorf("target of a direct message = %s, want %s", got, want)
	}
	if len(fc.sent) != 0 {
		t.Errorf("%d messages sent on fresh results", len(fc.sent))
	}
	undeclared := newProducer(nil, nil, "p", nil, nil)
	if d := undeclared.deliveryTo("p.a", msg); d.divert != nil {
		t.Error("an undeclared producer diverts")
	}
}

// A job routed by a probe counts as done only if it was confirmed within
// divert.Grace of the probe's sending; a nacked one, one not routed by a
// probe and one never confirmed are judged as they would be anyway.
func TestJudgeMarksTheJobsConfirmedAGraceAfterTheirProbe(t *testing.T) {
	t.Parallel()
	p := fakeProducer(t, newFakeConfirmer(), nil, nil)
	probed := time.Now()
	var msg amqp.Publishing
	ds := make([]*delivery, 5)
	for i := range ds {
		ds[i] = p.deliveryTo("p.a", msg)
		ds[i].rk, ds[i].probed, ds[i].tries = "p.a", probed, 1
	}
	ds[3] = &delivery{key: "elsewhere", rk: "elsewhere", tries: 1} // not routed by a probe
	fates := []fate{
		{kind: acked, at: probed.Add(divert.Grace - time.Millisecond)}, // in time
		{kind: acked, at: probed.Add(divert.Grace)},                    // late
		{kind: nacked}, // refused
		{kind: acked, at: probed.Add(2 * divert.Grace)}, // late, but not probed
		{kind: unconfirmed, err: context.Canceled},      // never confirmed
	}
	var late []int
	for i, f := range fates {
		if p.judge(t.Context(), ds[i], f) {
			late = append(late, i)
		}
	}
	if len(late) != 1 || late[0] != 1 {
		t.Fatalf("late = %v, want [1]", late)
	}
	for i, want := range []step{stepDone, stepSend, stepDone, stepDone, stepDone} {
		if ds[i].next != want {
			t.Errorf("job %d: next %d, want %d", i, ds[i].next, want)
		}
	}
	if ds[0].err != nil || ds[3].err != nil || !errors.Is(ds[2].err, ErrNacked) || !errors.Is(ds[4].err, context.Canceled) {
		t.Errorf("errs = %v, %v, %v, %v", ds[0].err, ds[2].err, ds[3].err, ds[4].err)
	}
	if err := ds[1].err; err == nil || !strings.Contains(err.Error(), "may or may not have been enqueued") || !strings.Contains(err.Error(), `publish to "p.a"`) || ds[1].maybe != err {
		t.Errorf("error of the late job = %v, want one saying it may or may not have been enqueued, naming p.a", err)
	}
}
