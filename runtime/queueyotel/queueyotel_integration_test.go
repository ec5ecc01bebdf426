//go:build integration

package queueyotel_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/queueyotel"
)

type lifeArgs struct{}

func (lifeArgs) Kind() string  { return "otel.life" }
func (lifeArgs) Queue() string { return "jobs" }

// otelEnv is a broker prefix, an SDK tracer provider into a span recorder,
// and a meter provider read by hand.
type otelEnv struct {
	set    queuey.QueueSet
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	inst   *queueyotel.Instrumentation
}

func newOtelEnv(t *testing.T, tag string) *otelEnv {
	b := brokertest.New(t, "otel-"+tag)
	e := &otelEnv{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	e.set = queuey.QueueSet{Prefix: b.Prefix, Queues: []queuey.QueueConfig{{Name: "jobs"}}}
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	t.Cleanup(func() { _ = e.tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	inst, err := queueyotel.New(queueyotel.Options{TracerProvider: e.tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	e.inst = inst
	return e
}

// producer is an instrumented producer, closed when the test ends.
func (e *otelEnv) producer(t *testing.T) *queuey.Producer {
	var po queuey.ProducerOptions
	e.inst.InstrumentProducer(&po)
	p, err := queuey.NewProducer(context.Background(), brokertest.FromEnv().AMQPURL, e.set, &po)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// pool starts an instrumented pool, stopped when the test ends.
func (e *otelEnv) pool(t *testing.T, ws *queuey.Workers, wo *queuey.WorkerOptions) {
	e.inst.InstrumentWorker(wo)
	pool, err := queuey.NewWorkerPool(context.Background(), brokertest.FromEnv().AMQPURL, e.set, ws, wo)
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = pool.Stop(ctx)
	})
}

// collect reads the metrics, by instrument name.
func (e *otelEnv) collect(t *testing.T) map[string]metricdata.Aggregation {
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sums is a counter's points: value by the listed attributes' values.
func sums(t *testing.T, agg metricdata.Aggregation, keys ...attribute.Key) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	switch s := agg.(type) {
	case metricdata.Sum[int64]:
		for _, p := range s.DataPoints {
			out[label(p.Attributes, keys)] += p.Value
		}
	default:
		t.Fatalf("not an int64 sum: %T", agg)
	}
	return out
}

func label(set attribute.Set, keys []attribute.Key) string {
	l := ""
	for i, k := range keys {
		v, _ := set.Value(k)
		if i > 0 {
			l += "/"
		}
		l += v.Emit()
	}
	return l
}

// histogram is a histogram's count and max over every point.
func histogram(t *testing.T, agg metricdata.Aggregation) (count uint64, maxV float64) {
	t.Helper()
	h, ok := agg.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("not a float64 histogram: %T", agg)
	}
	for _, p := range h.DataPoints {
		count += p.Count
		if m, ok := p.Max.Value(); ok && m > maxV {
			maxV = m
		}
	}
	return count, maxV
}

func attr(attrs []attribute.KeyValue, k attribute.Key) attribute.Value {
	for _, a := range attrs {
		if a.Key == k {
			return a.Value
		}
	}
	return attribute.Value{}
}

// recordingHandler keeps the records a pool logs.
type recordingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// traceIDs are the trace_id attributes of the records whose message is msg.
func (h *recordingHandler) traceIDs(msg string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for _, r := range h.records {
		if r.Message != msg {
			continue
		}
		id := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "trace_id" {
				id = a.Value.String()
			}
			return true
		})
		ids = append(ids, id)
	}
	return ids
}

// A job enqueued inside an incoming trace fails twice, is deferred once and
// is dead-lettered: one producer span, a child of that trace; four consumer
// spans, each linked to it, with the attempt and deferrals of its run; the
// settled counter by outcome; and the pool's log records carrying the
// consumer spans' trace ids.
func TestJobLifeIsOneSetOfLinkedSpansAndItsMetrics(t *testing.T) {
	e := newOtelEnv(t, "life")
	const step = 300 * time.Millisecond
	var (
		mu   sync.Mutex
		runs int
	)
	ws := queuey.NewWorkers()
	queuey.AddWorker(ws, queuey.WorkFunc[lifeArgs](func(ctx context.Context, job *queuey.Job[lifeArgs]) error {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		if n == 3 {
			return queuey.JobDefer(step, "not yet")
		}
		return errors.New("boom")
	}))
	dead := make(chan queuey.Settlement, 1)
	logs := &recordingHandler{}
	e.pool(t, ws, &queuey.WorkerOptions{
		Logger:           slog.New(queueyotel.LogHandler(logs)),
		RetryByKind:      map[string]queuey.RetryPolicy{"otel.life": queuey.FixedRetry(3, step)},
		RetryGranularity: 100 * time.Millisecond,
		DeferGranularity: 100 * time.Millisecond,
		OnSettled: func(s queuey.Settlement) {
			if s.Outcome.Action == queuey.ActionDeadLetter {
				dead <- s
			}
		},
	})
	p := e.producer(t)

	incoming, request := e.tp.Tracer("test").Start(context.Background(), "incoming request", trace.WithSpanKind(trace.SpanKindServer))
	start := time.Now()
	id, err := queuey.EnqueueJob(incoming, p, lifeArgs{}, &queuey.EnqueueOptions{CorrelationID: "req-1"})
	request.End()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-dead:
		if s.Outcome.ReasonClass() != queuey.ReasonClassExhausted || s.Outcome.Job.ID != id {
			t.Fatalf("dead letter %+v: want job %s, exhausted", s.Outcome, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the job was not dead-lettered within 30 s")
	}
	elapsed := time.Since(start)

	var producer sdktrace.ReadOnlySpan
	var consumers []sdktrace.ReadOnlySpan
	for _, s := range e.spans.Ended() {
		switch s.SpanKind() {
		case trace.SpanKindProducer:
			producer = s
		case trace.SpanKindConsumer:
			consumers = append(consumers, s)
		}
	}
	if producer == nil {
		t.Fatal("no producer span")
	}
	work := e.set.WorkQueue("jobs")
	if producer.Parent().SpanID() != request.SpanContext().SpanID() || producer.SpanContext().TraceID() != request.SpanContext().TraceID() {
		t.Errorf("producer span's parent = %v, want the incoming request's span %v", producer.Parent(), request.SpanContext())
	}
	for k, want := range map[attribute.Key]string{
		"messaging.system": "rabbitmq", "messaging.operation.type": "send", "messaging.destination.name": work,
		"messaging.message.id": id, "messaging.message.conversation_id": "req-1", "queuey.job.kind": "otel.life",
	} {
		if got := attr(producer.Attributes(), k).Emit(); got != want {
			t.Errorf("producer span %s = %q, want %q", k, got, want)
		}
	}
	if producer.Name() != "send "+work {
		t.Errorf("producer span name %q", producer.Name())
	}

	if len(consumers) != 4 {
		t.Fatalf("%d consumer spans, want 4 (two failures, a deferral, the last failure)", len(consumers))
	}
	wantAttempt, wantDeferrals := []int64{1, 2, 3, 3}, []int64{0, 0, 0, 1}
	consumerTraces := map[string]bool{}
	for n, s := range consumers {
		if s.Parent().IsValid() {
			t.Errorf("run %d: consumer span has a parent %v: it must be a root linked to the producer", n+1, s.Parent())
		}
		if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != producer.SpanContext().SpanID() {
			t.Errorf("run %d: links %v, want one to the producer span %v", n+1, s.Links(), producer.SpanContext().SpanID())
		}
		if got := attr(s.Attributes(), "queuey.job.attempt").AsInt64(); got != wantAttempt[n] {
			t.Errorf("run %d: attempt %d, want %d", n+1, got, wantAttempt[n])
		}
		if got := attr(s.Attributes(), "queuey.job.deferrals").AsInt64(); got != wantDeferrals[n] {
			t.Errorf("run %d: deferrals %d, want %d", n+1, got, wantDeferrals[n])
		}
		for k, want := range map[attribute.Key]string{"messaging.system": "rabbitmq", "messaging.operation.type": "process", "messaging.message.id": id, "messaging.rabbitmq.destination.routing_key": work} {
			if got := attr(s.Attributes(), k).Emit(); got != want {
				t.Errorf("run %d: %s = %q, want %q", n+1, k, got, want)
			}
		}
		wantStatus := codes.Error
		if n == 2 {
			wantStatus = codes.Unset // a deferral is not a failure
		}
		if s.Status().Code != wantStatus {
			t.Errorf("run %d: status %v, want %v", n+1, s.Status().Code, wantStatus)
		}
		consumerTraces[s.SpanContext().TraceID().String()] = true
	}

	m := e.collect(t)
	if got := sums(t, m["queuey.jobs.enqueued"], "queuey.job.queue", "queuey.job.kind"); got[work+"/otel.life"] != 1 || len(got) != 1 {
		t.Errorf("enqueued %v, want 1 of %s/otel.life", got, work)
	}
	settled := sums(t, m["queuey.jobs.settled"], "queuey.outcome", "queuey.reason")
	if want := map[string]int64{"retried/": 2, "deferred/": 1, "dead_lettered/exhausted": 1}; !equal(settled, want) {
		t.Errorf("settled %v, want %v", settled, want)
	}
	if n, _ := histogram(t, m["queuey.job.duration"]); n != 4 {
		t.Errorf("job.duration has %d points, want 4", n)
	}
	// Every run starts soon after it was meant to: the wait is measured from
	// the hold queue's release, not from the first enqueue, which was
	// three steps (900 ms) before the last run.
	if n, worst := histogram(t, m["queuey.job.wait"]); n != 4 || worst > step.Seconds() || elapsed < 3*step {
		t.Errorf("job.wait: %d points, longest %.3f s (want 4, each under %s; the life took %s)", n, worst, step, elapsed)
	}
	if n, _ := histogram(t, m["queuey.enqueue.duration"]); n != 1 {
		t.Errorf("enqueue.duration has %d points, want 1", n)
	}
	if got := sums(t, m["queuey.jobs.in_flight"], "queuey.job.queue"); got[work] != 0 {
		t.Errorf("in flight %v, want 0 once the job is dead", got)
	}

	for _, msg := range []string{"queuey: job failed; retrying", "queuey: job deferred", "queuey: job dead-lettered"} {
		ids := logs.traceIDs(msg)
		if len(ids) == 0 {
			t.Errorf("no %q record", msg)
		}
		for _, tid := range ids {
			if !consumerTraces[tid] {
				t.Errorf("%q record has trace_id %q, not one of the consumer spans' %v", msg, tid, consumerTraces)
			}
		}
	}
}

// Deliveries that never reach a handler are counted with their reason
// class; a batch is one producer span whose context every job carries.
func TestUnhandledDeliveriesAndABatch(t *testing.T) {
	e := newOtelEnv(t, "unhandled")
	ws := queuey.NewWorkers()
	var handled sync.WaitGroup
	handled.Add(3)
	queuey.AddWorker(ws, queuey.WorkFunc[lifeArgs](func(ctx context.Context, job *queuey.Job[lifeArgs]) error {
		handled.Done()
		return nil
	}))
	settled := make(chan queuey.Settlement, 8)
	e.pool(t, ws, &queuey.WorkerOptions{OnSettled: func(s queuey.Settlement) { settled <- s }})
	p := e.producer(t)
	work := e.set.WorkQueue("jobs")

	if _, err := p.EnqueueBatch(context.Background(), []queuey.BatchJob{{Queue: "jobs", JobType: "otel.life", Payload: lifeArgs{}}, {Queue: "jobs", JobType: "otel.life", Payload: lifeArgs{}}, {Queue: "jobs", JobType: "otel.life", Payload: lifeArgs{}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(context.Background(), "jobs", "nobody.handles", map[string]int{}, nil); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(brokertest.FromEnv().AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", work, true, false, amqp.Publishing{Body: []byte("not an envelope")}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		select {
		case <-settled:
		case <-time.After(30 * time.Second):
			t.Fatal("not every delivery was settled within 30 s")
		}
	}
	handled.Wait()

	m := e.collect(t)
	got := sums(t, m["queuey.jobs.settled"], "queuey.outcome", "queuey.reason")
	if want := map[string]int64{"acked/": 3, "dead_lettered/unknown_kind": 1, "dead_lettered/malformed": 1}; !equal(got, want) {
		t.Errorf("settled %v, want %v", got, want)
	}
	if got := sums(t, m["queuey.jobs.enqueued"], "queuey.job.kind"); got["otel.life"] != 3 || got["nobody.handles"] != 1 {
		t.Errorf("enqueued %v, want 3 otel.life and 1 nobody.handles", got)
	}
	var batch sdktrace.ReadOnlySpan
	links := map[trace.SpanID]int{}
	for _, s := range e.spans.Ended() {
		if s.SpanKind() == trace.SpanKindProducer && attr(s.Attributes(), "messaging.batch.message_count").AsInt64() == 3 {
			batch = s
		}
		if s.SpanKind() == trace.SpanKindConsumer {
			for _, l := range s.Links() {
				links[l.SpanContext.SpanID()]++
			}
		}
	}
	if batch == nil {
		t.Fatal("no producer span with messaging.batch.message_count 3")
	}
	if links[batch.SpanContext().SpanID()] != 3 {
		t.Errorf("%d consumer spans link to the batch's span, want 3 (links: %v)", links[batch.SpanContext().SpanID()], links)
	}
}

func equal(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
