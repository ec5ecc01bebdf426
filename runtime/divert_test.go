package queuey

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
)

// Within DivertRecheck of a probe, route decides from the cache alone: no
// channel is needed (pc is nil here), and only direct publishes to a work
// queue of the set are diverted.
func TestRouteGoesByAFreshResultWithoutProbing(t *testing.T) {
	t.Parallel()
	set := QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "a"}, {Name: "b"}}}
	p := newProducer(nil, false, &set, "p", nil)
	p.diverts["p.a"].last.Store(&probeResult{sentAt: time.Now(), diverted: true})
	p.diverts["p.b"].last.Store(&probeResult{sentAt: time.Now(), diverted: false})

	var msg amqp.Publishing
	out := []outgoing{
		p.outgoingTo("p.a", msg),
		p.outgoingTo("p.b", msg),
		p.outgoingTo("p.a.dead", msg),
		{key: "p.a.deferred.1000", msg: msg}, // as publishHeld builds it
		p.outgoingTo("p.a", msg),
	}
	pending := []int{0, 1, 2, 3, 4}
	errs := make([]error, len(out))
	send, retry := p.route(t.Context(), nil, out, pending, errs)
	if len(send) != len(out) || len(retry) != 0 {
		t.Fatalf("send %v, retry %v, errs %v; want every message sent", send, retry, errs)
	}
	for i, want := range []string{"p.a.migrating", "p.b", "p.a.dead", "p.a.deferred.1000", "p.a.migrating"} {
		if out[i].rk != want {
			t.Errorf("message %d to %s: routing key %q, want %q", i, out[i].key, out[i].rk, want)
		}
	}
	if got, want := out[0].target(), `"p.a" (diverted to "p.a.migrating" while it is migrated)`; got != want {
		t.Errorf("target of a diverted message = %s, want %s", got, want)
	}
	if got, want := out[1].target(), `"p.b"`; got != want {
		t.Errorf("target of a direct message = %s, want %s", got, want)
	}
	if n := p.probesSent.Load(); n != 0 {
		t.Errorf("%d probes sent on fresh results", n)
	}

	undeclared := newProducer(nil, false, nil, "p", nil)
	if o := undeclared.outgoingTo("p.a", msg); o.divert != nil {
		t.Error("an undeclared producer diverts")
	}
}

func TestProbeResultIsTrustedForDivertRecheckFromItsSending(t *testing.T) {
	t.Parallel()
	var none *probeResult
	if none.fresh() {
		t.Error("no result is fresh")
	}
	if !(&probeResult{sentAt: time.Now().Add(-200 * time.Millisecond)}).fresh() {
		t.Error("a result sent 200 ms ago is stale")
	}
	if (&probeResult{sentAt: time.Now().Add(-250 * time.Millisecond)}).fresh() {
		t.Error("a result sent 250 ms ago is fresh")
	}
	if none.usable() {
		t.Error("no result is usable")
	}
	if !(&probeResult{sentAt: time.Now().Add(-450 * time.Millisecond)}).usable() {
		t.Error("a result sent 450 ms ago is unusable")
	}
	if (&probeResult{sentAt: time.Now().Add(-500 * time.Millisecond)}).usable() {
		t.Error("a result sent 500 ms ago is usable")
	}
}

// A job routed by a probe counts as done only if it was confirmed within
// DivertGrace of the probe's sending; the others are left alone.
func TestConfirmedLateMarksTheJobsConfirmedAGraceAfterTheirProbe(t *testing.T) {
	t.Parallel()
	set := QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "a"}}}
	p := newProducer(nil, false, &set, "p", nil)
	probed := time.Now()
	var msg amqp.Publishing
	out := make([]outgoing, 5)
	for i := range out {
		out[i] = p.outgoingTo("p.a", msg)
		out[i].rk, out[i].probed = "p.a", probed
	}
	out[3] = p.outgoingTo("p.a.dead", msg) // not routed by a probe
	out[3].rk = "p.a.dead"
	nacked := errors.New("nacked")
	errs := []error{nil, nil, nacked, nil, nil}
	for i, at := range []time.Time{
		probed.Add(divert.Grace - time.Millisecond), // in time
		probed.Add(divert.Grace),                    // late
		probed.Add(2 * divert.Grace),                // late, but nacked
		probed.Add(2 * divert.Grace),                // late, but not probed
		{},                                          // never confirmed
	} {
		out[i].confirmed = at
	}
	late := confirmedLate(out, []int{0, 1, 2, 3, 4}, errs)
	if !slices.Equal(late, []int{1}) {
		t.Fatalf("late = %v, want [1]", late)
	}
	if errs[0] != nil || errs[3] != nil || errs[4] != nil || errs[2] != nacked {
		t.Errorf("errs = %v; only message 1 should have changed", errs)
	}
	if err := errs[1]; err == nil || !strings.Contains(err.Error(), "may or may not have been enqueued") || !strings.Contains(err.Error(), `publish to "p.a"`) {
		t.Errorf("error of the late job = %v, want one saying it may or may not have been enqueued, naming p.a", err)
	}
}
