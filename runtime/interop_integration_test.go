//go:build integration

package queuey_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// The interop tests run the vectors of testdata/interop through a real
// worker pool on the broker, and check what this runtime publishes against
// the original queuey's decoder rules. Each vector is a message as the
// original queuey (Rust, crates queuey-core and queuey-rabbitmq 1.x) writes
// it, byte for byte in its body, with its AMQP properties and the AMQP
// field types of its headers, and names the file and commit of the
// original's source it follows. The original cannot be built here, so the
// vectors were written from its source. The table of what crosses unchanged
// and what differs on purpose is docs/guides/interop.md.
//
// Two properties the original sets cannot be sent by amqp091-go: priority 0
// and an empty type (it leaves a zero property out). RabbitMQ delivers an
// absent priority as 0 and an absent type as "", which is what a consumer
// of the original's message reads too.

// interopVector is one file of testdata/interop.
type interopVector struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Follows     []string `json:"follows"`
	Properties  struct {
		ContentType  string `json:"content_type"`
		DeliveryMode uint8  `json:"delivery_mode"`
		Priority     uint8  `json:"priority"`
		MessageID    string `json:"message_id"`
		Type         string `json:"type"`
	} `json:"properties"`
	Headers map[string]struct {
		Type  string          `json:"type"`
		Value json.RawMessage `json:"value"`
	} `json:"headers"`
	// Body is the message body, with {{queue}} where the original writes
	// the broker name of the queue (the test's prefix is random).
	Body   string `json:"body"`
	Expect struct {
		Action       string `json:"action"` // ack, defer-then-ack, dead-letter
		Reason       string `json:"reason"`
		ReasonPrefix string `json:"reason_prefix"`
		Seen         *struct {
			Attempt       int    `json:"attempt"`
			Deferrals     int    `json:"deferrals"`
			Priority      uint8  `json:"priority"`
			CorrelationID string `json:"correlation_id"`
		} `json:"seen"`
	} `json:"expect"`
}

var followsRef = regexp.MustCompile(`^github\.com/jaapieaapie1/queuey crates/(core|rabbitmq)/src/[a-z_]+\.rs@[0-9a-f]{40} \(`)

func loadInteropVectors(t *testing.T) []interopVector {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "interop", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vectors in testdata/interop: %v", err)
	}
	var vs []interopVector
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v interopVector
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(v.Follows) == 0 {
			t.Fatalf("%s names no source of the original it follows", f)
		}
		for _, ref := range v.Follows {
			if !followsRef.MatchString(ref) {
				t.Fatalf("%s: %q does not name a file and commit of the original's source", f, ref)
			}
		}
		vs = append(vs, v)
	}
	return vs
}

// publishing is the vector as the original publishes it onto work.
func (v interopVector) publishing(t *testing.T, work string) amqp.Publishing {
	t.Helper()
	h := amqp.Table{}
	for name, f := range v.Headers {
		var n uint64
		if err := json.Unmarshal(f.Value, &n); err != nil && f.Type != "S" {
			t.Fatalf("%s: header %s: %v", v.Name, name, err)
		}
		switch f.Type {
		case "i": // lapin's LongUInt
			h[name] = uint32(n)
		case "B": // ShortShortUInt
			h[name] = uint8(n)
		case "S":
			var s string
			_ = json.Unmarshal(f.Value, &s)
			h[name] = s
		default:
			t.Fatalf("%s: header %s of field type %q: not one the original writes", v.Name, name, f.Type)
		}
	}
	return amqp.Publishing{
		Headers:      h,
		ContentType:  v.Properties.ContentType,
		DeliveryMode: v.Properties.DeliveryMode,
		Priority:     v.Properties.Priority,
		MessageId:    v.Properties.MessageID,
		Type:         v.Properties.Type,
		Body:         []byte(strings.ReplaceAll(v.Body, "{{queue}}", work)),
	}
}

// Job kinds of the vectors, named as Rust job types are.
type (
	ioCharge struct {
		Customer    string `json:"customer"`
		AmountCents int    `json:"amount_cents"`
	}
	ioEmail struct {
		To string `json:"to"`
	}
	ioRefund struct {
		Charge string `json:"charge"`
	}
	ioLimited struct {
		N int `json:"n"`
	}
	ioPanic struct{}
	ioSlow  struct{}
)

func (ioCharge) Kind() string   { return "billing::ChargeCard" }
func (ioCharge) Queue() string  { return "interop" }
func (ioEmail) Kind() string    { return "mail::SendEmail" }
func (ioEmail) Queue() string   { return "interop" }
func (ioRefund) Kind() string   { return "billing::Refund" }
func (ioRefund) Queue() string  { return "interop" }
func (ioLimited) Kind() string  { return "rate::Limited" }
func (ioLimited) Queue() string { return "interop" }
func (ioPanic) Kind() string    { return "chaos::Panic" }
func (ioPanic) Queue() string   { return "interop" }
func (ioSlow) Kind() string     { return "slow::Report" }
func (ioSlow) Queue() string    { return "interop" }

// ioSlowWorker outlives its 50 ms timeout.
type ioSlowWorker struct{}

func (ioSlowWorker) Work(ctx context.Context, _ *queuey.Job[ioSlow]) error {
	<-ctx.Done()
	return ctx.Err()
}
func (ioSlowWorker) Timeout(*queuey.Job[ioSlow]) time.Duration { return 50 * time.Millisecond }

// ioSeen records the runs of every job, by id.
type ioSeen struct {
	mu   sync.Mutex
	runs map[string][]queuey.JobContext
}

func (s *ioSeen) add(jc queuey.JobContext) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs[jc.ID] = append(s.runs[jc.ID], jc)
}

func (s *ioSeen) of(id string) []queuey.JobContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]queuey.JobContext(nil), s.runs[id]...)
}

// ioWorkers are the handlers of the vectors' job kinds. failDelay is the
// retry delay of mail::SendEmail and deferDelay the deferral of
// rate::Limited's first run.
func ioWorkers(seen *ioSeen, deferDelay time.Duration) *queuey.Workers {
	ws := queuey.NewWorkers()
	queuey.AddWorker(ws, queuey.WorkFunc[ioCharge](func(_ context.Context, j *queuey.Job[ioCharge]) error {
		seen.add(j.JobContext)
		return nil
	}))
	queuey.AddWorker(ws, queuey.WorkFunc[ioEmail](func(_ context.Context, j *queuey.Job[ioEmail]) error {
		seen.add(j.JobContext)
		return errors.New("smtp: 421 try again")
	}))
	queuey.AddWorker(ws, queuey.WorkFunc[ioRefund](func(_ context.Context, j *queuey.Job[ioRefund]) error {
		return queuey.JobFatal(errors.New("card declined"))
	}))
	queuey.AddWorker(ws, queuey.WorkFunc[ioLimited](func(_ context.Context, j *queuey.Job[ioLimited]) error {
		seen.add(j.JobContext)
		if j.Deferrals == 0 {
			return queuey.JobDefer(deferDelay, "Retry-After")
		}
		return nil
	}))
	queuey.AddWorker(ws, queuey.WorkFunc[ioPanic](func(context.Context, *queuey.Job[ioPanic]) error { panic("boom") }))
	queuey.AddWorker[ioSlow](ws, ioSlowWorker{})
	return ws
}

// declareAsTheOriginal declares the work queue as the original's
// topology::queue_args does: durable, x-max-priority an unsigned 8-bit
// integer (field type B), so that the pool's own declaration (a 64-bit
// integer) must be found equivalent for the two fleets to share a queue.
func declareAsTheOriginal(t *testing.T, e *wkEnv, work string, maxPriority uint8) {
	t.Helper()
	ch, err := e.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(work, true, false, false, false, amqp.Table{"x-max-priority": maxPriority}); err != nil {
		t.Fatalf("declare %s as the original does: %v", work, err)
	}
}

// TestIntegrationInteropVectorsAreHandledAsTheOriginalWould runs every
// vector of testdata/interop through a real worker pool, on a work queue the
// original declared, and checks that it is handled as the original would
// handle it: run and acked with what the handler sees, deferred and run
// again, or dead-lettered with the original's reason.
func TestIntegrationInteropVectorsAreHandledAsTheOriginalWould(t *testing.T) {
	t.Parallel()
	vs := loadInteropVectors(t)
	e := wkSetup(t, "interop")
	set := e.set(queuey.QueueConfig{Name: "interop", Prefetch: 20, MaxPriority: 10})
	work, dead := set.WorkQueue("interop"), set.DeadQueue("interop")
	declareAsTheOriginal(t, e, work, 10)
	seen := &ioSeen{runs: map[string][]queuey.JobContext{}}
	once := queuey.RetryPolicy{Strategy: queuey.RetryNone}
	e.start(set, ioWorkers(seen, 200*time.Millisecond), &queuey.WorkerOptions{
		Retry:            &queuey.RetryPolicy{Strategy: queuey.RetryFixed, MaxAttempts: 3, Base: 100 * time.Millisecond},
		RetryByKind:      map[string]queuey.RetryPolicy{"chaos::Panic": once, "slow::Report": once},
		RetryGranularity: 100 * time.Millisecond,
		DeferGranularity: 100 * time.Millisecond,
	})
	wantDead := map[string]interopVector{}
	for _, v := range vs {
		msg := v.publishing(t, work)
		publishWith(t, e, work, msg)
		if v.Expect.Action == "dead-letter" {
			wantDead[string(msg.Body)] = v
		}
	}

	for _, v := range vs {
		if v.Expect.Seen == nil {
			continue
		}
		runs := 1
		if v.Expect.Action == "defer-then-ack" {
			runs = 2
		}
		id := v.Properties.MessageID
		wkEventually(t, 15*time.Second, func() bool { return len(seen.of(id)) >= runs }, "vector %s to run %d times", v.Name, runs)
		got := seen.of(id)
		if len(got) != runs {
			t.Errorf("vector %s ran %d times, want %d", v.Name, len(got), runs)
			continue
		}
		jc, want := got[runs-1], v.Expect.Seen
		if jc.Attempt != want.Attempt || jc.Deferrals != want.Deferrals || jc.Priority != want.Priority || jc.CorrelationID != want.CorrelationID || jc.Queue != work {
			t.Errorf("vector %s: the handler saw attempt %d, deferrals %d, priority %d, correlation id %q, queue %s; want %d, %d, %d, %q, %s",
				v.Name, jc.Attempt, jc.Deferrals, jc.Priority, jc.CorrelationID, jc.Queue, want.Attempt, want.Deferrals, want.Priority, want.CorrelationID, work)
		}
	}

	for _, d := range e.waitDead(dead, len(wantDead), 20*time.Second) {
		v, ok := wantDead[string(d.Body)]
		if !ok {
			t.Errorf("unexpected dead letter %q (reason %v)", d.Body, d.Headers[topology.HeaderDeathReason])
			continue
		}
		delete(wantDead, string(d.Body))
		reason, _ := d.Headers[topology.HeaderDeathReason].(string)
		switch {
		case v.Expect.Reason != "" && reason != v.Expect.Reason:
			t.Errorf("vector %s: x-death-reason %q, want the original's %q", v.Name, reason, v.Expect.Reason)
		case v.Expect.ReasonPrefix != "" && !strings.HasPrefix(reason, v.Expect.ReasonPrefix):
			t.Errorf("vector %s: x-death-reason %q, want it to start as the original's %q", v.Name, reason, v.Expect.ReasonPrefix)
		}
		if d.Headers[topology.HeaderOriginalQueue] != work {
			t.Errorf("vector %s: x-original-queue %v, want %s", v.Name, d.Headers[topology.HeaderOriginalQueue], work)
		}
	}
	for body, v := range wantDead {
		t.Errorf("vector %s was not dead-lettered (body %.80s)", v.Name, body)
	}
	if n := e.ready(work); n != 0 {
		t.Errorf("%d messages left in the work queue", n)
	}
}

// originalDecodes applies the original's decoder rules (serde's derive over
// crates/core/src/envelope.rs's Envelope) to body, independently of this
// runtime's decoder: job_id a UUID; job_type and queue strings; attempt an
// unsigned 32-bit integer and enqueued_at_ms an unsigned 64-bit one,
// present; deferrals (u32) and priority (u8) optional; correlation_id a
// string or absent; payload present.
func originalDecodes(body []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return err
	}
	str := func(k string) (string, error) {
		var s string
		raw, ok := m[k]
		if !ok {
			return "", fmt.Errorf("missing field `%s`", k)
		}
		if err := json.Unmarshal(raw, &s); err != nil || string(raw) == "null" {
			return "", fmt.Errorf("%s: not a string: %s", k, raw)
		}
		return s, nil
	}
	unsigned := func(k string, max uint64, required bool) error {
		raw, ok := m[k]
		if !ok {
			if required {
				return fmt.Errorf("missing field `%s`", k)
			}
			return nil
		}
		var n uint64
		if err := json.Unmarshal(raw, &n); err != nil || n > max || strings.ContainsAny(string(raw), ".eE") {
			return fmt.Errorf("%s: %s is not an unsigned integer of at most %d", k, raw, max)
		}
		return nil
	}
	id, err := str("job_id")
	if err != nil {
		return err
	}
	if !regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`).MatchString(id) {
		return fmt.Errorf("job_id %q is not a UUID", id)
	}
	for _, k := range []string{"job_type", "queue"} {
		if _, err := str(k); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		k        string
		max      uint64
		required bool
	}{{"attempt", math.MaxUint32, true}, {"enqueued_at_ms", math.MaxUint64, true}, {"deferrals", math.MaxUint32, false}, {"priority", math.MaxUint8, false}} {
		if err := unsigned(f.k, f.max, f.required); err != nil {
			return err
		}
	}
	if raw, ok := m["correlation_id"]; ok {
		if _, err := str("correlation_id"); err != nil && string(raw) != "null" {
			return err
		}
	}
	if _, ok := m["payload"]; !ok {
		return errors.New("missing field `payload`")
	}
	return nil
}

// TestIntegrationInteropEnvelopesThisRuntimePublishesSatisfyTheOriginal
// checks every envelope this runtime publishes (an enqueue, a delayed
// enqueue, a producer's deferral, a worker's retry and a worker's deferral)
// against the original's decoder rules and its properties (persistent,
// application/json, message_id the job id, type the job type), and the
// producer's deferral against the original's count: deferrals 0, since a
// deferral is counted when a handler defers.
func TestIntegrationInteropEnvelopesThisRuntimePublishesSatisfyTheOriginal(t *testing.T) {
	t.Parallel()
	e := wkSetup(t, "interop-out")
	set := e.set(queuey.QueueConfig{Name: "interop", Prefetch: 4, MaxPriority: 10})
	work := set.WorkQueue("interop")
	hold := topology.HoldName(work, 30000)
	p := e.producer(set)
	ctx := context.Background()
	type want struct {
		attempt, deferrals int
		priority           uint8
	}
	wants := map[string]want{}
	enqueued, err := queuey.EnqueueJob(ctx, p, ioCharge{Customer: "cus_go", AmountCents: 3}, &queuey.EnqueueOptions{CorrelationID: "req-go"})
	if err != nil {
		t.Fatal(err)
	}
	wants[enqueued] = want{1, 0, 0}
	check := func(what string, d amqp.Delivery) {
		t.Helper()
		if err := originalDecodes(d.Body); err != nil {
			t.Errorf("%s: the original would refuse %s: %v", what, d.Body, err)
		}
		var env queuey.Envelope
		_ = json.Unmarshal(d.Body, &env)
		if d.ContentType != "application/json" || d.DeliveryMode != amqp.Persistent || d.MessageId != env.JobID || d.Type != env.JobType || d.Priority != env.Priority {
			t.Errorf("%s: properties %q %d %q %q %d do not mirror the envelope %+v as the original's do", what, d.ContentType, d.DeliveryMode, d.MessageId, d.Type, d.Priority, env)
		}
		w, ok := wants[env.JobID]
		if !ok {
			t.Errorf("%s: unexpected job %s", what, d.Body)
			return
		}
		if env.Attempt != w.attempt || env.Deferrals != w.deferrals || env.Priority != w.priority {
			t.Errorf("%s: attempt %d, deferrals %d, priority %d; want %d, %d, %d", what, env.Attempt, env.Deferrals, env.Priority, w.attempt, w.deferrals, w.priority)
		}
	}
	got := e.getAll(work)
	if len(got) != 1 {
		t.Fatalf("%d messages in the work queue after one enqueue", len(got))
	}
	check("Enqueue", got[0])

	later, err := queuey.EnqueueJobAfter(ctx, p, ioCharge{Customer: "cus_later"}, 30*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	wants[later] = want{1, 0, 0}
	deferred, err := queuey.DeferJob(ctx, p, ioCharge{Customer: "cus_deferred"}, 30*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	wants[deferred] = want{1, 0, 10}

	// The worker's retry and deferral of jobs the original enqueued.
	seen := &ioSeen{runs: map[string][]queuey.JobContext{}}
	e.start(set, ioWorkers(seen, 30*time.Second), &queuey.WorkerOptions{
		Retry: &queuey.RetryPolicy{Strategy: queuey.RetryFixed, MaxAttempts: 3, Base: 30 * time.Second},
	})
	const retried, rdeferred = "c6d7e8f9-0a1b-4c23-8516-2b3c4d5e6f70", "d7e8f90a-1b2c-4d34-9627-3c4d5e6f7081"
	for id, kind := range map[string]string{retried: "mail::SendEmail", rdeferred: "rate::Limited"} {
		body := `{"job_id":"` + id + `","job_type":"` + kind + `","queue":"` + work + `","attempt":1,"enqueued_at_ms":1700000000000,"deferrals":0,"priority":0,"payload":{"n":1,"to":"x"}}`
		publishWith(t, e, work, amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: id, Type: kind,
			Headers: amqp.Table{"x-attempt": uint32(1), "x-deferrals": uint32(0)}, Body: []byte(body)})
	}
	wants[retried] = want{2, 0, 0}
	wants[rdeferred] = want{1, 1, 10}
	wkEventually(t, 15*time.Second, func() bool { return e.ready(hold) == 4 }, "%s to hold the delayed, deferred, retried and handler-deferred jobs", hold)
	held := e.getAll(hold)
	for _, d := range held {
		check("held job "+d.MessageId, d)
	}
	if len(held) != 4 {
		t.Errorf("%d jobs held, want 4", len(held))
	}
}
