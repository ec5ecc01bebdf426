package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

func TestNewPublishingCarriesTheEnvelope(t *testing.T) {
	t.Parallel()
	env := Envelope{
		JobID:         "0b0e4c58-2f54-4a7e-9a5a-6f0c8a4d1e2f",
		JobType:       "send_email",
		Queue:         "myapp.emails",
		Attempt:       3,
		EnqueuedAtMs:  1700000000123,
		Deferrals:     2,
		Priority:      10,
		CorrelationID: "req-42",
		Payload:       json.RawMessage(`{"to":"a@example.com"}`),
	}
	before := time.Now().Truncate(time.Second)
	msg, err := newPublishing(env, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := msg.Headers, (amqp.Table{"x-deferrals": int64(2), "x-attempt": int64(3)}); !reflect.DeepEqual(got, want) {
		t.Errorf("headers = %#v, want %#v", got, want)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"ContentType", msg.ContentType, "application/json"},
		{"DeliveryMode", msg.DeliveryMode, amqp.Persistent},
		{"Priority", msg.Priority, uint8(10)},
		{"CorrelationId", msg.CorrelationId, "req-42"},
		{"MessageId", msg.MessageId, env.JobID},
		{"Type", msg.Type, "send_email"},
		{"Expiration", msg.Expiration, ""},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
	if msg.Timestamp.Before(before) || msg.Timestamp.After(time.Now()) {
		t.Errorf("Timestamp = %v, want now", msg.Timestamp)
	}
	var fields map[string]any
	if err := json.Unmarshal(msg.Body, &fields); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"job_id": env.JobID, "job_type": "send_email", "queue": "myapp.emails", "attempt": 3.0,
		"enqueued_at_ms": 1700000000123.0, "deferrals": 2.0, "priority": 10.0, "correlation_id": "req-42",
		"payload": map[string]any{"to": "a@example.com"},
	}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("body = %v, want %v", fields, want)
	}
	back, err := decodeEnvelope(msg.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, env) {
		t.Errorf("round trip = %+v, want %+v", back, env)
	}
}

func TestNewPublishingTransientAndNoCorrelationID(t *testing.T) {
	t.Parallel()
	msg, err := newPublishing(Envelope{JobID: "x", JobType: "t", Queue: "p.q", Attempt: 1, Payload: json.RawMessage(`null`)}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg.DeliveryMode != amqp.Transient {
		t.Errorf("DeliveryMode = %d, want transient", msg.DeliveryMode)
	}
	if strings.Contains(string(msg.Body), "correlation_id") {
		t.Errorf("body %s has a correlation_id; an empty one is omitted", msg.Body)
	}
	if msg.CorrelationId != "" {
		t.Errorf("CorrelationId = %q, want empty", msg.CorrelationId)
	}
}

func TestNewPublishingRefusesAnInvalidPayload(t *testing.T) {
	t.Parallel()
	_, err := newPublishing(Envelope{JobID: "x", Payload: json.RawMessage(`{not json`)}, true, nil)
	if err == nil {
		t.Fatal("want an error for a payload that is not JSON")
	}
}

func TestNewPublishingStripsDeathHeadersAndKeepsOthers(t *testing.T) {
	t.Parallel()
	in := amqp.Table{
		"x-death":                   []any{amqp.Table{"count": int64(1)}},
		"x-first-death-reason":      "expired",
		"x-first-death-queue":       "p.q.deferred.1000",
		"x-first-death-exchange":    "",
		"x-last-death-reason":       "expired",
		"x-last-death-queue":        "p.q.deferred.1000",
		"x-last-death-exchange":     "",
		"x-deferrals":               int64(7),
		"x-attempt":                 int64(7),
		"traceparent":               "00-abc-def-01",
		"x-death-reason-not-broker": "kept: only the broker's own headers go",
	}
	msg, err := newPublishing(Envelope{JobID: "x", JobType: "t", Attempt: 2, Deferrals: 1, Payload: json.RawMessage(`{}`)}, true, in)
	if err != nil {
		t.Fatal(err)
	}
	want := amqp.Table{
		"x-deferrals":               int64(1),
		"x-attempt":                 int64(2),
		"traceparent":               "00-abc-def-01",
		"x-death-reason-not-broker": "kept: only the broker's own headers go",
	}
	if !reflect.DeepEqual(msg.Headers, want) {
		t.Errorf("headers = %#v, want %#v", msg.Headers, want)
	}
	if _, ok := in["x-death"]; !ok {
		t.Error("the caller's table was modified")
	}
}

func TestStripDeathHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   amqp.Table
		want amqp.Table
	}{
		{nil, amqp.Table{}},
		{amqp.Table{}, amqp.Table{}},
		{amqp.Table{"x-death": "a"}, amqp.Table{}},
		{amqp.Table{"x-first-death-queue": "a", "x-last-death-exchange": "", "a": int64(1)}, amqp.Table{"a": int64(1)}},
		{amqp.Table{"x-deaths": "a", "X-Death": "b"}, amqp.Table{"x-deaths": "a", "X-Death": "b"}},
		// A quorum queue's count of the original's deliveries.
		{amqp.Table{"x-delivery-count": int64(19), "x-attempt": int64(2)}, amqp.Table{"x-attempt": int64(2)}},
	} {
		if got := stripDeathHeaders(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("stripDeathHeaders(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestDeclareErrorParsesPreconditionFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reason string
		arg    string
	}{
		{"PRECONDITION_FAILED - inequivalent arg 'x-max-priority' for queue 'a.b' in vhost '/': received the value '10' of type 'signedint' but current is none", "x-max-priority"},
		{"PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'a.b' in vhost '/': received the value '2000' of type 'signedint' but current is the value '1000' of type 'long'", "x-message-ttl"},
		{"PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'a.b' in vhost '/': received 'false' but current is 'true'", "durable"},
		{"PRECONDITION_FAILED - something new", ""},
	} {
		err := declareError("a.b", &amqp.Error{Code: amqp.PreconditionFailed, Reason: tc.reason, Server: true})
		var pe *PreconditionError
		if !errors.As(err, &pe) {
			t.Fatalf("declareError(%q) = %v, want a *PreconditionError", tc.reason, err)
		}
		if pe.Queue != "a.b" || pe.Argument != tc.arg || pe.Detail != tc.reason {
			t.Errorf("declareError(%q) = %+v, want queue a.b, argument %q", tc.reason, pe, tc.arg)
		}
		if !errors.Is(err, ErrPreconditionFailed) {
			t.Errorf("errors.Is(%v, ErrPreconditionFailed) = false", err)
		}
		if tc.arg != "" && !strings.Contains(err.Error(), tc.arg) {
			t.Errorf("message %q does not name %s", err, tc.arg)
		}
	}
}

func TestPreconditionErrorOnAHoldQueueSaysToDeleteIt(t *testing.T) {
	t.Parallel()
	reason := "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'a.b.deferred.1000' in vhost '/': received the value '1000' of type 'long' but current is none"
	err := declareError("a.b.deferred.1000", &amqp.Error{Code: amqp.PreconditionFailed, Reason: reason, Server: true})
	if msg := err.Error(); !strings.Contains(msg, "hold queue") || !strings.Contains(msg, "delete this one") || strings.Contains(msg, "terraform") {
		t.Errorf("Error() = %q, want advice to delete a hold queue, not to migrate it", msg)
	}
	work := declareError("a.b", &amqp.Error{Code: amqp.PreconditionFailed, Reason: reason, Server: true})
	if !strings.Contains(work.Error(), "migrate") {
		t.Errorf("Error() = %q, want advice to migrate a work queue", work)
	}
}

func TestDeclareErrorWrapsOtherErrors(t *testing.T) {
	t.Parallel()
	err := declareError("a.b", amqp.ErrClosed)
	var pe *PreconditionError
	if errors.As(err, &pe) {
		t.Fatalf("a closed channel became %v", pe)
	}
	if !errors.Is(err, amqp.ErrClosed) || !strings.Contains(err.Error(), `"a.b"`) {
		t.Errorf("declareError = %v, want amqp.ErrClosed wrapped with the queue name", err)
	}
}

func TestBackoffStaysInItsBand(t *testing.T) {
	t.Parallel()
	for n, ceiling := range []time.Duration{
		500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 30 * time.Second, 30 * time.Second,
	} {
		for range 200 {
			if d := backoff(n); d < ceiling/2 || d > ceiling {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, d, ceiling/2, ceiling)
			}
		}
	}
	if d := backoff(1000); d < 15*time.Second || d > 30*time.Second {
		t.Errorf("backoff(1000) = %v, want at most 30s", d)
	}
}

func TestProducerOptionsDefaultsAndChecks(t *testing.T) {
	t.Parallel()
	o := (*ProducerOptions)(nil).resolved()
	if o.Channels != DefaultPublishChannels || o.DelayGranularity != time.Second || o.DeferGranularity != time.Second || o.Logger == nil {
		t.Errorf("defaults = %+v", o)
	}
	if err := o.validate(); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
	for _, bad := range []ProducerOptions{
		{DelayGranularity: -time.Second},
		{DeferGranularity: 1500 * time.Microsecond},
		{DelayGranularity: 25 * 24 * time.Hour},
	} {
		r := (&bad).resolved()
		if err := r.validate(); err == nil {
			t.Errorf("options %+v were accepted", bad)
		}
	}
	cfg := (&ProducerOptions{AMQPConfig: &amqp.Config{Vhost: "v", Recovery: &amqp.Recovery{}}}).resolved().amqpConfig()
	if cfg.Vhost != "v" || cfg.Recovery != nil {
		t.Errorf("amqpConfig = %+v, want the caller's config without Recovery", cfg)
	}
}

func TestProducerResolvesQueueNames(t *testing.T) {
	t.Parallel()
	set := QueueSet{Prefix: "app", Queues: []QueueConfig{
		{Name: "emails"},
		{Name: "reports", MaxPriority: NoPriority, NonDurable: true, MessageTTL: time.Minute},
	}}
	p := newProducer(nil, &set, set.Prefix, nil, nil)
	if got := p.workName("emails"); got != "app.emails" {
		t.Errorf("workName = %q", got)
	}
	q, ok := p.queueConfig("app.emails")
	if want := (topology.Queue{Name: "emails", MaxPriority: 10, Durable: true}); !ok || q != want {
		t.Errorf("queueConfig(app.emails) = %+v, %v; want %+v", q, ok, want)
	}
	q, ok = p.queueConfig("app.reports")
	if want := (topology.Queue{Name: "reports", MaxPriority: 0, Durable: false, MessageTTL: time.Minute}); !ok || q != want {
		t.Errorf("queueConfig(app.reports) = %+v, %v; want %+v", q, ok, want)
	}
	if _, ok := p.queueConfig("emails"); ok {
		t.Error("queueConfig found a logical name; it takes broker names")
	}
	if _, ok := p.queueConfig("app.emails.dead"); ok {
		t.Error("queueConfig found a dead-letter queue")
	}

	undeclared := newProducer(nil, nil, "", nil, nil)
	if got := undeclared.workName("other.queue"); got != "other.queue" {
		t.Errorf("an undeclared producer without prefix named %q", got)
	}
	if _, ok := undeclared.queueConfig("other.queue"); ok {
		t.Error("an undeclared producer knows a queue")
	}
}

func TestDelaysOnUnknownQueuesFailBeforeAnyIO(t *testing.T) {
	t.Parallel()
	set := QueueSet{Prefix: "app", Queues: []QueueConfig{{Name: "emails"}}}
	// No conn: anything that tried to publish would panic.
	p := newProducer(nil, &set, set.Prefix, nil, nil)
	_, err := p.EnqueueAfter(t.Context(), "other", "t", nil, time.Second, nil)
	if !errors.Is(err, ErrUnknownQueue) {
		t.Errorf("EnqueueAfter on an unknown queue = %v, want ErrUnknownQueue", err)
	}
	_, err = p.Defer(t.Context(), "emails", "t", nil, 30*24*time.Hour, nil)
	if !errors.Is(err, ErrDelayTooLong) {
		t.Fatalf("Defer of 30d = %v, want ErrDelayTooLong", err)
	}
	if want := "delay of 30d is longer than a hold queue can wait (24d 20h 31m 23s); it was refused rather than released early"; err.Error() != want {
		t.Errorf("Defer of 30d = %q, want %q", err, want)
	}
	if _, err := p.Enqueue(t.Context(), "emails", "", nil, nil); err == nil {
		t.Error("an empty job type was accepted")
	}
	if _, err := p.Enqueue(t.Context(), "emails", "t", func() {}, nil); err == nil {
		t.Error("a payload that cannot be encoded was accepted")
	}
	if _, err := p.EnqueueBatch(t.Context(), []BatchJob{{Queue: "emails", JobType: "t"}, {Queue: "emails"}}); err == nil {
		t.Error("a batch with an invalid job was accepted")
	}
}

func TestBatchError(t *testing.T) {
	t.Parallel()
	unroutable := fmt.Errorf("queuey: publish to %q: %w", "p.x", ErrUnroutable)
	err := error(&BatchError{Errs: []error{nil, unroutable, nil, ErrNacked}})
	if !errors.Is(err, ErrUnroutable) || !errors.Is(err, ErrNacked) {
		t.Errorf("errors.Is does not see the jobs' errors in %v", err)
	}
	if want := `queuey: 2 of 4 jobs of the batch were not enqueued; job 1: queuey: publish to "p.x": job was unroutable`; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
}

// waitForWaiters polls until n callers have joined the flight of key, or
// reports false after 10 s: a do that never shares never gets there.
func waitForWaiters(fs *flights, key string, n int) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		fs.mu.Lock()
		f := fs.m[key]
		joined := f != nil && f.waiters == n
		fs.mu.Unlock()
		if joined {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

func TestFlightsShareACallInProgressAndForgetIt(t *testing.T) {
	t.Parallel()
	var fs flights
	var calls atomic.Int32
	started := make(chan struct{})
	boom := errors.New("refused")
	const key, followers = "q.deferred.1000", 9
	var joined atomic.Bool
	fn := func(context.Context) error {
		if calls.Add(1) == 1 {
			close(started)
			// Land only once every follower has joined this call.
			joined.Store(waitForWaiters(&fs, key, followers))
		}
		return boom
	}
	errs := make(chan error, followers+1)
	go func() { errs <- fs.do(t.Context(), key, fn) }()
	<-started
	for range followers {
		go func() { errs <- fs.do(t.Context(), key, fn) }()
	}
	for range followers + 1 {
		if err := <-errs; !errors.Is(err, boom) {
			t.Errorf("shared result = %v, want %v", err, boom)
		}
	}
	if !joined.Load() {
		t.Errorf("the followers never joined the call in progress")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d callers made %d calls, want 1", followers+1, n)
	}

	// Nothing is remembered: the next call runs again.
	before := calls.Load()
	if err := fs.do(t.Context(), "q.deferred.1000", func(context.Context) error { calls.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != before+1 {
		t.Error("a finished call was remembered")
	}
	if len(fs.m) != 0 {
		t.Errorf("%d flights left", len(fs.m))
	}
}

// A held publish reasons from when the declaration it used started; one it
// joined started before it joined, and that earlier time is the bound.
func TestFlightsReportWhenTheSharedCallStarted(t *testing.T) {
	t.Parallel()
	var fs flights
	const key = "q.deferred.100"
	started := make(chan struct{})
	release := make(chan struct{})
	leader := make(chan time.Time, 1)
	before := time.Now()
	go func() {
		at, _ := fs.doAt(t.Context(), key, func(context.Context) error {
			close(started)
			<-release
			return nil
		})
		leader <- at
	}()
	<-started
	time.Sleep(20 * time.Millisecond)
	joinedAt := time.Now()
	follower := make(chan time.Time, 1)
	go func() {
		at, _ := fs.doAt(t.Context(), key, func(context.Context) error { return nil })
		follower <- at
	}()
	if !waitForWaiters(&fs, key, 1) {
		t.Fatal("the follower never joined the call in progress")
	}
	close(release)
	la, fa := <-leader, <-follower
	if la.Before(before) || !la.Before(joinedAt) {
		t.Errorf("leader's call started at %v, want between %v and %v", la, before, joinedAt)
	}
	if !fa.Equal(la) {
		t.Errorf("follower reports %v, want the shared call's start %v, before it joined at %v", fa, la, joinedAt)
	}
	// A new call starts now, not when the last one did.
	if at, _ := fs.doAt(t.Context(), key, func(context.Context) error { return nil }); !at.After(la) {
		t.Errorf("a new call reports %v, not after the finished one's %v", at, la)
	}
}

func TestFlightsRetryWhenTheLeadersContextEnded(t *testing.T) {
	t.Parallel()
	var fs flights
	leaderCtx, cancelLeader := context.WithCancel(t.Context())
	started := make(chan struct{})
	leaderDone := make(chan error, 1)
	go func() {
		leaderDone <- fs.do(leaderCtx, "k", func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return fmt.Errorf("declare: %w", ctx.Err())
		})
	}()
	<-started
	followerDone := make(chan error, 1)
	var followerCalls atomic.Int32
	go func() {
		followerDone <- fs.do(t.Context(), "k", func(context.Context) error {
			followerCalls.Add(1)
			return nil
		})
	}()
	if !waitForWaiters(&fs, "k", 1) {
		t.Error("the follower never joined the leader's call")
	}
	cancelLeader()
	if err := <-leaderDone; !errors.Is(err, context.Canceled) {
		t.Errorf("leader = %v, want its own cancellation", err)
	}
	if err := <-followerDone; err != nil {
		t.Errorf("follower = %v, want it to declare again under its own context", err)
	}
	if followerCalls.Load() != 1 {
		t.Errorf("follower ran %d calls, want 1", followerCalls.Load())
	}
}

// Regression: Close waited for the publishes in flight, and a publish whose
// context has no deadline waits for a lost connection as long as the broker
// is down, so Close hung with it.
func TestCloseDoesNotWaitForABrokerThatIsDown(t *testing.T) {
	t.Parallel()
	c := newConn(nil, nil)
	c.redial = true // a conn between connections: channel waits for ready
	p := newProducer(c, nil, "", nil, nil)
	published := make(chan error, 1)
	go func() {
		_, err := p.Enqueue(context.Background(), "jobs", "t", nil, nil)
		published <- err
	}()
	// Close only once the publish holds a publishing channel: it is then
	// waiting for the connection.
	for len(p.pool) == cap(p.pool) {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close = %v", err)
		}
	case <-time.After(time.Minute): // only so that the bug fails rather than hangs
		t.Fatal("Close is still waiting for the publish in flight")
	}
	if err := <-published; !errors.Is(err, ErrClosed) {
		t.Errorf("the publish in flight = %v, want ErrClosed", err)
	}
}

// The one rule for persistence, used by single and batch publishes alike.
func TestPersistentUnlessTheQueueIsKnownTransient(t *testing.T) {
	t.Parallel()
	set := QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "durable"}, {Name: "transient", NonDurable: true}}}
	p := newProducer(nil, &set, set.Prefix, nil, nil)
	for queue, want := range map[string]bool{"p.durable": true, "p.transient": false, "elsewhere": true} {
		if got := persistent(p.queueConfig(queue)); got != want {
			t.Errorf("%s: persistent %v, want %v", queue, got, want)
		}
	}
}
