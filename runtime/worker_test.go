package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// fakePublisher records republishes, in order with acks, and fails on demand.
type fakePublisher struct {
	mu     sync.Mutex
	events *[]string
	envs   []Envelope
	ttls   []int64
	hdrs   []amqp.Table
	raws   []amqp.Publishing
	rawQs  []string
	fail   error
}

func (f *fakePublisher) publishEnvelopeWith(_ context.Context, env Envelope, ttl int64, h amqp.Table) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.events = append(*f.events, "publish")
	if f.fail != nil {
		return f.fail
	}
	f.envs, f.ttls, f.hdrs = append(f.envs, env), append(f.ttls, ttl), append(f.hdrs, h)
	return nil
}

func (f *fakePublisher) publishRaw(_ context.Context, queue string, msg amqp.Publishing) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.events = append(*f.events, "publish-raw")
	if f.fail != nil {
		return f.fail
	}
	f.raws, f.rawQs = append(f.raws, msg), append(f.rawQs, queue)
	return nil
}

func (f *fakePublisher) waitUnblocked(context.Context) error { return nil }

// fakeAck is an amqp.Acknowledger that records what was done.
type fakeAck struct{ events *[]string }

func (a fakeAck) Ack(uint64, bool) error { *a.events = append(*a.events, "ack"); return nil }
func (a fakeAck) Nack(_ uint64, _ bool, requeue bool) error {
	if requeue {
		*a.events = append(*a.events, "nack-requeue")
	} else {
		*a.events = append(*a.events, "nack")
	}
	return nil
}
func (a fakeAck) Reject(uint64, bool) error { *a.events = append(*a.events, "reject"); return nil }

type settleBundle struct {
	pool   *WorkerPool
	pub    *fakePublisher
	events *[]string
	q      *poolQueue
	hooked []DeadLetter
}

func setupSettle(t *testing.T, hook func(context.Context, DeadLetter)) *settleBundle {
	t.Helper()
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[plainArgs](func(ctx context.Context, j *Job[plainArgs]) error {
		switch j.Args.N {
		case 0:
			return nil
		case 1:
			return errors.New("flaky")
		case 2:
			return JobDefer(2*time.Second, "Retry-After: 2")
		case 4:
			<-ctx.Done()
			return ctx.Err()
		}
		return JobFatal(errors.New("never"))
	}))
	b := &settleBundle{events: &[]string{}}
	opts := &WorkerOptions{
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		Retry:            &RetryPolicy{MaxAttempts: 3, Base: 100 * time.Millisecond},
		RetryGranularity: 100 * time.Millisecond,
		OnDeadLetter: func(ctx context.Context, dl DeadLetter) {
			b.hooked = append(b.hooked, dl)
			if hook != nil {
				hook(ctx, dl)
			}
		},
	}
	set := QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "q1", MaxPriority: 7}, {Name: "q2"}}}
	pool, err := newWorkerPool(set, ws, opts)
	if err != nil {
		t.Fatal(err)
	}
	b.pub = &fakePublisher{events: b.events}
	pool.pub = b.pub
	b.pool, b.q = pool, pool.queues[0]
	return b
}

func (b *settleBundle) deliver(t *testing.T, body []byte) {
	t.Helper()
	b.deliverTo(&subscription{pool: b.pool, q: b.q}, body)
}

// deliverTo hands body to s as a delivery of b's queue.
func (b *settleBundle) deliverTo(s *subscription, body []byte) {
	d := amqp.Delivery{
		Acknowledger: fakeAck{b.events}, Body: body, ContentType: "application/json", MessageId: "m1", Type: "plain",
		Priority: 3, CorrelationId: "corr", Expiration: "60000", UserId: "guest",
		Headers: amqp.Table{"x-death": []any{amqp.Table{"count": int64(1)}}, "x-first-death-queue": "p.q1.deferred.100", "x-last-death-reason": "expired", "custom": "kept", topology.HeaderAttempt: int64(2),
			topology.HeaderDeathReason: "replayed", topology.HeaderOriginalQueue: "p.q1", topology.HeaderAttempts: int64(3)},
	}
	s.handle(d, nil)
}

func TestWorkerPoolOptions(t *testing.T) {
	t.Parallel()
	set := QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "q1", Prefetch: 5}, {Name: "q2"}}}
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[plainArgs](func(context.Context, *Job[plainArgs]) error { return nil }))
	pool, err := newWorkerPool(set, ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cap(pool.sem) != 5+DefaultPrefetch {
		t.Errorf("default concurrency %d, want the sum of prefetch %d", cap(pool.sem), 5+DefaultPrefetch)
	}
	if pool.queues[0].deferPriority != topology.DefaultMaxPriority || pool.queues[0].work != "p.q1" || pool.queues[0].dead != "p.q1.dead" {
		t.Errorf("queue: %+v", pool.queues[0])
	}
	if name := pool.connCfg.Properties["connection_name"]; name != "queuey worker p" {
		t.Errorf("connection name %v", name)
	}
	pool, err = newWorkerPool(set, ws, &WorkerOptions{Queues: []string{"q2"}, Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(pool.queues) != 1 || pool.queues[0].name != "q2" || cap(pool.sem) != 3 {
		t.Errorf("restricted pool: %d queues, concurrency %d", len(pool.queues), cap(pool.sem))
	}
	for _, bad := range []*WorkerOptions{
		{Queues: []string{"nope"}},
		{RetryByQueue: map[string]RetryPolicy{"nope": {}}},
		{Concurrency: -1},
		{JobTimeout: -time.Second},
		{Retry: &RetryPolicy{Factor: 0.1}},
	} {
		if _, err := newWorkerPool(set, ws, bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	other := QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "q2"}}}
	if _, err := newWorkerPool(other, ws, nil); err == nil || !strings.Contains(err.Error(), `goes to queue "q1", which is not in queue set`) {
		t.Errorf("a kind for a queue outside the set: %v", err)
	}
}

func TestWorkerPoolSettleAck(t *testing.T) {
	t.Parallel()
	b := setupSettle(t, nil)
	b.deliver(t, envelopeBody(t, "plain", "p.q1", 1, plainArgs{N: 0}))
	if got := strings.Join(*b.events, ","); got != "ack" {
		t.Errorf("events %s", got)
	}
}

func TestWorkerPoolSettleRetryPublishesThenAcks(t *testing.T) {
	t.Parallel()
	b := setupSettle(t, nil)
	b.deliver(t, envelopeBody(t, "plain", "p.q1", 2, plainArgs{N: 1}))
	if got := strings.Join(*b.events, ","); got != "publish,ack" {
		t.Fatalf("events %s", got)
	}
	env := b.pub.envs[0]
	if env.Attempt != 3 || env.Priority != 0 || env.Deferrals != 0 || env.Queue != "p.q1" {
		t.Errorf("retry envelope %+v", env)
	}
	// attempt 2: bound 200 ms, in 100 ms steps
	if ttl := b.pub.ttls[0]; ttl != 100 && ttl != 200 {
		t.Errorf("hold TTL %d ms, want 100 or 200", ttl)
	}
	if b.pub.hdrs[0]["custom"] != "kept" {
		t.Errorf("headers not carried over: %v", b.pub.hdrs[0])
	}
	if _, stale := b.pub.hdrs[0][topology.HeaderDeathReason]; stale {
		t.Errorf("a replayed dead letter's reason was carried into its retry: %v", b.pub.hdrs[0])
	}
}

func TestWorkerPoolSettleDeferKeepsAttemptAtMaxPriority(t *testing.T) {
	t.Parallel()
	b := setupSettle(t, nil)
	b.deliver(t, envelopeBody(t, "plain", "p.q1", 3, plainArgs{N: 2}))
	if got := strings.Join(*b.events, ","); got != "publish,ack" {
		t.Fatalf("events %s", got)
	}
	env := b.pub.envs[0]
	if env.Attempt != 3 || env.Priority != 7 || env.Deferrals != 1 || b.pub.ttls[0] != 2000 {
		t.Errorf("deferral envelope %+v, ttl %d", env, b.pub.ttls[0])
	}
}

func TestWorkerPoolSettleDeadLetter(t *testing.T) {
	t.Parallel()
	b := setupSettle(t, func(context.Context, DeadLetter) { panic("hook exploded") })
	body := envelopeBody(t, "plain", "p.q1", 1, plainArgs{N: 3})
	b.deliver(t, body)
	if got := strings.Join(*b.events, ","); got != "publish-raw,ack" {
		t.Fatalf("events %s", got)
	}
	if len(b.hooked) != 1 || b.hooked[0].Reason != "fatal error: never" {
		t.Errorf("hook saw %+v", b.hooked)
	}
	msg := b.pub.raws[0]
	if b.pub.rawQs[0] != "p.q1.dead" || string(msg.Body) != string(body) {
		t.Errorf("dead letter to %s with body %s", b.pub.rawQs[0], msg.Body)
	}
	h := msg.Headers
	if h[topology.HeaderDeathReason] != "fatal error: never" || h[topology.HeaderOriginalQueue] != "p.q1" || h[topology.HeaderAttempts] != int64(1) {
		t.Errorf("headers %v", h)
	}
	for k := range h {
		if k == "x-death" || strings.HasPrefix(k, "x-first-death") || strings.HasPrefix(k, "x-last-death") {
			t.Errorf("broker header %s copied", k)
		}
	}
	if h["custom"] != "kept" || msg.MessageId != "m1" || msg.Type != "plain" || msg.CorrelationId != "corr" || msg.DeliveryMode != amqp.Persistent {
		t.Errorf("properties not kept: %+v", msg)
	}
	if msg.Expiration != "" || msg.UserId != "" {
		t.Errorf("expiration %q or user id %q copied", msg.Expiration, msg.UserId)
	}
}

func TestWorkerPoolSettleMalformedCopiedVerbatim(t *testing.T) {
	t.Parallel()
	b := setupSettle(t, nil)
	b.deliver(t, []byte("\x00garbage"))
	if got := strings.Join(*b.events, ","); got != "publish-raw,ack" {
		t.Fatalf("events %s", got)
	}
	msg := b.pub.raws[0]
	if string(msg.Body) != "\x00garbage" || msg.Headers[topology.HeaderDeathReason] != ReasonMalformedEnvelope || msg.Headers[topology.HeaderAttempts] != int64(2) {
		t.Errorf("malformed dead letter %+v", msg)
	}
}

func TestWorkerPoolSettleNeverAcksAFailedRepublish(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3} {
		b := setupSettle(t, nil)
		b.pub.fail = errors.New("broker said no")
		b.pool.stopCancel() // skip the pause before requeueing
		b.deliver(t, envelopeBody(t, "plain", "p.q1", 1, plainArgs{N: n}))
		// The settle's publish, then the give-back's copy, which fails
		// too, then the requeue.
		got := strings.Join(*b.events, ",")
		if got != "publish,publish-raw,nack-requeue" && got != "publish-raw,publish-raw,nack-requeue" {
			t.Errorf("N=%d: events %s", n, got)
		}
	}
}

func TestHeaderInt(t *testing.T) {
	t.Parallel()
	h := amqp.Table{"a": int32(4), "b": int64(5), "c": "6", "d": uint8(7)}
	for k, want := range map[string]int{"a": 4, "b": 5, "c": 0, "d": 7, "e": 0} {
		if got := headerInt(h, k); got != want {
			t.Errorf("%s: %d, want %d", k, got, want)
		}
	}
}

func TestEnvelopeBodyHelperDecodes(t *testing.T) {
	t.Parallel()
	var env Envelope
	if err := json.Unmarshal(envelopeBody(t, "k", "q", 1, 1), &env); err != nil || env.JobType != "k" {
		t.Fatal(env, err)
	}
}

func TestResubscribeBackoffIsJitteredAndCapped(t *testing.T) {
	t.Parallel()
	for n := range 40 {
		bound := min(resubscribeMinBackoff<<min(n, 20), resubscribeMaxBackoff)
		for range 50 {
			d := resubscribeBackoff(n)
			if d < bound/2 || d > bound {
				t.Fatalf("resubscribeBackoff(%d) = %s, want within [%s, %s]", n, d, bound/2, bound)
			}
		}
	}
}

func TestWorkerPoolRefusesPrefetchAboveTheAMQPLimit(t *testing.T) {
	t.Parallel()
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[plainArgs](func(context.Context, *Job[plainArgs]) error { return nil }))
	set := QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "q1", Prefetch: 70000}}}
	if _, err := newWorkerPool(set, ws, nil); err == nil {
		t.Error("a prefetch of 70000 was accepted")
	}
}

// Regression: amqp091-go closes a channel's cancel notifications when the
// channel shuts down, and the pool logged every lost connection as the
// broker cancelling its consumer.
func TestSessionCancelledOnlyByACancellation(t *testing.T) {
	t.Parallel()
	closed := make(chan string, 1)
	close(closed)
	if (&subscription{cancels: closed}).cancelled() {
		t.Error("a closed notification channel (the channel shut down) was taken for a cancellation")
	}
	if (&subscription{cancels: make(chan string, 1)}).cancelled() {
		t.Error("an empty notification channel was taken for a cancellation")
	}
	sent := make(chan string, 1)
	sent <- "queuey-p.jobs-1234"
	s := &subscription{cancels: sent}
	if !s.cancelled() {
		t.Error("the broker's cancellation was missed")
	}
	// The handlers of the subscription and consume each ask; the one
	// notification answers all of them.
	if !s.cancelled() {
		t.Error("the broker's cancellation was forgotten once read")
	}
}

// Regression: a Stop that ran out of time cancelled the running handlers and
// settled their jobs as failures, which dead-lettered a job on its last
// attempt. A shutdown is not an attempt: the delivery goes back as it is,
// as a copy published to the work queue (a requeue would come back marked
// redelivered, which counts as an attempt whose worker died: issue 18).
func TestWorkerPoolSettleInterruptedByStopRequeuesWithoutAnAttempt(t *testing.T) {
	t.Parallel()
	b := setupSettle(t, nil)
	b.pool.jobCancel() // what Stop does when its context ends
	// The last of 3 attempts: settled as a failure, it was dead-lettered.
	body := envelopeBody(t, "plain", "p.q1", 3, plainArgs{N: 4})
	b.deliver(t, body)
	if got := strings.Join(*b.events, ","); got != "publish-raw,ack" {
		t.Fatalf("events %s, want a copy published to the work queue, then the delivery acked", got)
	}
	if b.pub.rawQs[0] != "p.q1" || string(b.pub.raws[0].Body) != string(body) {
		t.Errorf("copy to %s with body %s, want the delivery as it came, to its work queue", b.pub.rawQs[0], b.pub.raws[0].Body)
	}
	if len(b.hooked) != 0 {
		t.Errorf("the dead-letter hook ran: %+v", b.hooked)
	}
}

// The lowest level of the retry precedence, the queue's default, comes from
// the queue set: QueueConfig.Retry, with WorkerOptions.Retry below it.
func TestWorkerPoolTakesTheQueueDefaultRetryFromTheSet(t *testing.T) {
	t.Parallel()
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[plainArgs](func(context.Context, *Job[plainArgs]) error { return errors.New("no") }))
	set := QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "q1", Retry: &RetryPolicy{MaxAttempts: 6}}, {Name: "q2"}}}
	pool, err := newWorkerPool(set, ws, &WorkerOptions{Retry: &RetryPolicy{MaxAttempts: 5}})
	if err != nil {
		t.Fatal(err)
	}
	for queue, want := range map[string]int{"q1": 6, "q2": 5} {
		o := pool.disp.Dispatch(t.Context(), queue, envelopeBody(t, "plain", "p."+queue, 1, plainArgs{N: 1}))
		if o.Job.MaxAttempts != want {
			t.Errorf("queue %s: %d attempts, want %d", queue, o.Job.MaxAttempts, want)
		}
	}
	bad := QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "q1", Retry: &RetryPolicy{MaxAttempts: -1}}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `queue "q1": default retry policy`) {
		t.Errorf("a queue default that cannot be followed: %v", err)
	}
}

// cancelledSubscription is a subscription of b's queue whose consumer the
// broker has cancelled, as it does when a migration deletes the queue.
func cancelledSubscription(b *settleBundle) *subscription {
	cancels := make(chan string, 1)
	cancels <- "queuey-p.q1-1234"
	return &subscription{pool: b.pool, q: b.q, cancels: cancels}
}

// A job handed back once its queue was deleted under it cannot be requeued
// (deleting the queue dropped the delivery): it is published to the work
// queue again, as it came but for the user id, and then acknowledged.
func TestWorkerPoolGiveBackAfterCancellationPublishesThenAcks(t *testing.T) {
	t.Parallel()
	b := setupSettle(t, nil)
	b.pool.jobCancel() // interrupted by a Stop: ActionRequeue
	body := envelopeBody(t, "plain", "p.q1", 2, plainArgs{N: 4})
	b.deliverTo(cancelledSubscription(b), body)
	if got := strings.Join(*b.events, ","); got != "publish-raw,ack" {
		t.Fatalf("events %s, want the job published to its work queue, then acked", got)
	}
	msg := b.pub.raws[0]
	if b.pub.rawQs[0] != "p.q1" || string(msg.Body) != string(body) || msg.MessageId != "m1" || msg.Priority != 3 {
		t.Errorf("published to %s: %+v", b.pub.rawQs[0], msg)
	}
	if msg.UserId != "" {
		t.Errorf("user id %q kept: the broker refuses one that is not the publisher's", msg.UserId)
	}
	if msg.Headers[topology.HeaderAttempt] != int64(2) {
		t.Errorf("headers %v, want the attempt kept", msg.Headers)
	}
}

// If that publish fails, a requeue would drop the job too: the delivery is
// left unsettled for the channel's close to return.
func TestWorkerPoolGiveBackAfterCancellationLeavesAFailedPublishUnsettled(t *testing.T) {
	t.Parallel()
	b := setupSettle(t, nil)
	b.pub.fail = errors.New("broker said no")
	b.pool.jobCancel()
	b.deliverTo(cancelledSubscription(b), envelopeBody(t, "plain", "p.q1", 2, plainArgs{N: 4}))
	if got := strings.Join(*b.events, ","); got != "publish-raw" {
		t.Errorf("events %s, want the publish tried and the delivery neither acked nor requeued", got)
	}
}
