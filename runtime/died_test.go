package queuey

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// Issue 18: a job that killed its worker was redelivered forever at
// attempt 1, because the attempt lives in the body and a redelivery does
// not change it. A redelivery now counts as a failed attempt, without
// running the handler: retried as the next attempt while the policy allows,
// dead-lettered with a reason that says the runs never finished after that.
func TestRedeliveryCountsAsAnAttempt(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[plainArgs](func(context.Context, *Job[plainArgs]) error {
		runs.Add(1)
		return nil
	}))
	policy := RetryPolicy{Strategy: RetryFixed, Base: time.Second, MaxAttempts: 3}
	d, err := NewDispatcher(ws, &WorkerOptions{Retry: &policy})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		attempt, diedBefore int
		want                Action
		died                int
		reason              string
	}{
		{attempt: 1, want: ActionRetry, died: 1},
		{attempt: 2, diedBefore: 1, want: ActionRetry, died: 2},
		{attempt: 3, diedBefore: 2, want: ActionDeadLetter, died: 3,
			reason: "max attempts (3) exhausted after attempt 3: worker died during the job 3 times (it never finished)"},
		// Attempts that failed in the ordinary way before the crash
		// count as attempts, but not as deaths.
		{attempt: 3, want: ActionDeadLetter, died: 1,
			reason: "max attempts (3) exhausted after attempt 3: worker died during the job once (it never finished)"},
	} {
		var h amqp.Table
		if tc.diedBefore > 0 {
			h = amqp.Table{topology.HeaderDied: int32(tc.diedBefore)} // any integer width
		}
		o := d.dispatch(context.Background(), "q1", envelopeBody(t, "plain", "p.q1", tc.attempt, plainArgs{}), h, redeliveryDied, time.Now(), nil)
		if o.Action != tc.want || o.died != tc.died || o.Reason != tc.reason || !errors.Is(o.Err, ErrWorkerDied) {
			t.Errorf("redelivered at attempt %d after %d deaths: action %s, died %d, reason %q, err %v; want %s, %d, %q",
				tc.attempt, tc.diedBefore, o.Action, o.died, o.Reason, o.Err, tc.want, tc.died, tc.reason)
		}
		if o.Action == ActionRetry && (o.HoldTTL != time.Second || o.env == nil || o.Job.Attempt != tc.attempt) {
			t.Errorf("a retry after a death waits the policy's delay and is republished from the envelope: %+v", o)
		}
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the handler ran %d times on redeliveries, want 0: the run that died was the attempt", n)
	}

	// An ordinary delivery runs the handler, whatever the headers say.
	o := d.dispatch(context.Background(), "q1", envelopeBody(t, "plain", "p.q1", 1, plainArgs{}), amqp.Table{topology.HeaderDied: int64(2)}, redeliveryNone, time.Now(), nil)
	if o.Action != ActionAck || o.died != 0 || runs.Load() != 1 {
		t.Errorf("an ordinary delivery: action %s, died %d, runs %d", o.Action, o.died, runs.Load())
	}
	// With no retries at all, the first death is the last attempt.
	none := NoRetry()
	d2, err := NewDispatcher(ws, &WorkerOptions{Retry: &none})
	if err != nil {
		t.Fatal(err)
	}
	o = d2.dispatch(context.Background(), "q1", envelopeBody(t, "plain", "p.q1", 1, plainArgs{}), nil, redeliveryDied, time.Now(), nil)
	if o.Action != ActionDeadLetter || !strings.Contains(o.Reason, "worker died during the job once") {
		t.Errorf("no retries: %+v", o)
	}
	// A malformed body is dead-lettered as such, redelivered or not.
	o = d.dispatch(context.Background(), "q1", []byte("not json"), nil, redeliveryDied, time.Now(), nil)
	if o.Action != ActionDeadLetter || o.Reason != ReasonMalformedEnvelope {
		t.Errorf("malformed, redelivered: %+v", o)
	}
}

// Issue 18: the broker closes a channel whose delivery outlived its
// consumer_timeout and redelivers every unacknowledged delivery of it. The
// pool tells the close apart from other closes, and the redeliveries apart:
// the job that outlived the timeout counts an attempt, with a reason that
// says so; the others of the channel run again as they were.
func TestConsumerTimeoutRedeliveries(t *testing.T) {
	t.Parallel()
	// As RabbitMQ 3.10.8 sent it.
	closed := &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: 60000 ms. This timeout value can be configured, see consumers doc guide to learn more"}
	if !isConsumerTimeout(closed) {
		t.Error("the broker's consumer timeout was not recognised")
	}
	for _, e := range []*amqp.Error{nil, {Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-max-priority'"}, {Code: amqp.ConnectionForced, Reason: "timed out"}} {
		if isConsumerTimeout(e) {
			t.Errorf("%v taken for a consumer timeout", e)
		}
	}

	s := &subscription{held: map[uint64]heldDelivery{
		1: {id: "slow", at: time.Now().Add(-61 * time.Second)},
		2: {id: "quick", at: time.Now().Add(-2 * time.Second)},
	}}
	culprits, bystanders := s.overran(time.Minute)
	if len(culprits) != 1 || culprits[0] != "slow" || len(bystanders) != 1 || bystanders[0] != "quick" {
		t.Fatalf("culprits %v, bystanders %v", culprits, bystanders)
	}
	p := &WorkerPool{}
	p.rememberOverran(culprits, bystanders)
	for id, want := range map[string]redeliveryKind{"slow": redeliveryOverran, "quick": redeliveryNone, "other": redeliveryDied} {
		if got := p.redelivery(id); got != want {
			t.Errorf("redelivery of %s: %d, want %d", id, got, want)
		}
	}
	if got := p.redelivery("quick"); got != redeliveryDied {
		t.Errorf("a second redelivery of a bystander is %d: it is remembered once", got)
	}

	policy := RetryPolicy{Strategy: RetryFixed, Base: time.Second, MaxAttempts: 2}
	o := overranOutcome(JobContext{Attempt: 1}, time.Minute, policy, time.Second, nil)
	if o.Action != ActionRetry || !errors.Is(o.Err, ErrConsumerTimeoutExceeded) {
		t.Errorf("outlived on attempt 1 of 2: %+v", o)
	}
	o = overranOutcome(JobContext{Attempt: 2}, time.Minute, policy, time.Second, nil)
	if o.Action != ActionDeadLetter || o.Reason != "max attempts (2) exhausted after attempt 2: job outlived the broker's consumer timeout (1m0s)" {
		t.Errorf("outlived on attempt 2 of 2: %+v", o)
	}
}

// closedAck is the acknowledger of a delivery whose channel the broker has
// closed: every ack and nack fails.
type closedAck struct{}

func (closedAck) Ack(uint64, bool) error        { return amqp.ErrClosed }
func (closedAck) Nack(uint64, bool, bool) error { return amqp.ErrClosed }
func (closedAck) Reject(uint64, bool) error     { return amqp.ErrClosed }

// A job that only shared a channel the broker closed for its
// consumer_timeout, and whose handler finished just as the channel closed,
// fails its ack, and the broker delivers it again. The subscription must
// still count it among the channel's deliveries (a bystander) when the pool
// sorts them, or its redelivery counts as a death: an attempt it never
// used. Seen in the fault suite: 6 acks failed on the closed channel, 5
// deliveries were counted, and one job ran again at attempt 2. A delivery
// whose ack was written is no longer counted.
func TestAFailedAckKeepsTheDeliveryAmongTheChannels(t *testing.T) {
	t.Parallel()
	b := setupSettle(t, nil)
	s := &subscription{pool: b.pool, q: b.q, held: map[uint64]heldDelivery{}}
	for tag, acker := range map[uint64]amqp.Acknowledger{1: fakeAck{b.events}, 2: closedAck{}} {
		id := fmt.Sprint("job-", tag)
		s.held[tag] = heldDelivery{id: id, at: time.Now()}
		b.pool.sem <- struct{}{} // serve's part: a place of the concurrency
		s.inflight.Add(1)
		s.handleHeld(amqp.Delivery{Acknowledger: acker, DeliveryTag: tag, MessageId: id, ContentType: "application/json", Type: "plain",
			Body: envelopeBody(t, "plain", "p.q1", 1, plainArgs{N: 0})}, nil)
	}
	if got := strings.Join(*b.events, ","); got != "ack" {
		t.Fatalf("events %s, want job-1 acked", got)
	}
	culprits, bystanders := s.overran(time.Minute)
	if len(culprits) != 0 || fmt.Sprint(bystanders) != "[job-2]" {
		t.Errorf("culprits %v, bystanders %v; want job-2 alone, whose ack failed, among the bystanders", culprits, bystanders)
	}
}
