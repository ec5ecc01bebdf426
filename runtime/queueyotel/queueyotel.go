// Package queueyotel traces and measures queuey's jobs with OpenTelemetry,
// through the runtime's middleware: the runtime package itself imports no
// OpenTelemetry module, so a program that does not import this one links
// none.
//
// Wiring, with the providers of your program (or OpenTelemetry's globals):
//
//	inst, err := queueyotel.New(queueyotel.Options{})
//	inst.InstrumentProducer(&producerOpts) // before NewProducer
//	inst.InstrumentWorker(&workerOpts)     // before NewWorkerPool
//	_, err = inst.ObserveProducer(producer) // its Stats as metrics
//	logger := slog.New(queueyotel.LogHandler(handler)) // trace ids in logs
//
// # Traces
//
// Every enqueue call (Enqueue, EnqueueAfter, Defer, EnqueueBatch) is one
// span of kind producer, a child of the caller's context, named "send
// <work queue>", and its W3C trace context goes into every job's message
// headers (traceparent, tracestate). Every run of a handler is one span of
// kind consumer, named "process <work queue>", linked to the producer span
// of the job (a link, not a parent: a job may run hours after it was
// enqueued, in a trace of its own). Retries and deferrals keep the headers
// the job was delivered with, so every run of a job links to the span of
// the call that enqueued it. The attributes follow OpenTelemetry's
// messaging conventions for RabbitMQ (messaging.system "rabbitmq",
// messaging.operation.type and .name, messaging.destination.name, the
// routing key, messaging.message.id the job id, conversation id the
// correlation id), plus queuey.job.kind, queuey.job.queue (logical),
// queuey.job.attempt, queuey.job.deferrals, queuey.job.priority and, on a
// producer span, queuey.job.delay_ms. A handler's error sets the span's
// status to Error and is recorded on it; a deferral is an event instead.
//
// # Metrics
//
// Meter "github.com/queuey/terraform-provider-queuey/runtime/queueyotel":
//
//	queuey.jobs.enqueued     counter    jobs the broker confirmed, by queue and kind
//	queuey.enqueue.duration  histogram  seconds from an enqueue call's publish to its confirms, by queue
//	queuey.jobs.settled      counter    deliveries settled, by queue, kind, outcome and reason
//	queuey.job.duration      histogram  seconds a handler ran (middleware inside this one included), by queue and kind
//	queuey.job.wait          histogram  seconds from when a job was to be runnable (enqueued, or released
//	                                    from its hold queue) to the start of its run, by queue and kind
//	queuey.jobs.in_flight    updown     handler runs under way, by queue
//	queuey.producer.divert_probes, .late_confirms, .hold_renewals, .hold_resends
//	                         counters   a producer's Stats (ObserveProducer)
//
// The outcome of queuey.jobs.settled is one of acked, retried, deferred,
// dead_lettered, requeued (given back by a shutdown) and returned (the
// outcome could not be carried out, and the delivery goes back to its queue
// to be delivered again); a dead letter's reason is its
// queuey.ReasonClass (malformed, unknown_kind, fatal, exhausted,
// deferral_refused, died), empty for the other outcomes.
package queueyotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/queuey/terraform-provider-queuey/runtime/queueyotel"

// Attribute keys of queuey's own, beside the messaging conventions'.
const (
	AttrKind      = attribute.Key("queuey.job.kind")
	AttrQueue     = attribute.Key("queuey.job.queue")
	AttrAttempt   = attribute.Key("queuey.job.attempt")
	AttrDeferrals = attribute.Key("queuey.job.deferrals")
	AttrPriority  = attribute.Key("queuey.job.priority")
	AttrDelayMs   = attribute.Key("queuey.job.delay_ms")
	AttrOutcome   = attribute.Key("queuey.outcome")
	AttrReason    = attribute.Key("queuey.reason")
)

// Options configure an Instrumentation. Every field defaults to
// OpenTelemetry's global.
type Options struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Propagator writes trace context into message headers and reads it
	// back. Defaults to otel.GetTextMapPropagator(), or W3C trace context
	// when that global propagates nothing (its default).
	Propagator propagation.TextMapPropagator
}

// Instrumentation holds the tracer, the propagator and the instruments.
// One serves any number of producers and pools.
type Instrumentation struct {
	tracer     trace.Tracer
	meter      metric.Meter
	propagator propagation.TextMapPropagator

	enqueued   metric.Int64Counter
	enqueueDur metric.Float64Histogram
	settled    metric.Int64Counter
	duration   metric.Float64Histogram
	wait       metric.Float64Histogram
	inFlight   metric.Int64UpDownCounter

	// opts caches the measurement option of each (queue, kind), so that a
	// record does not build and sort an attribute set every time.
	opts sync.Map // setKey -> metric.MeasurementOption
}

// setKey names a cached attribute set; kind is empty for the queue's alone.
type setKey struct{ queue, kind string }

// attrs is the measurement option with queue and, when not empty, kind.
func (i *Instrumentation) attrs(queue, kind string) metric.MeasurementOption {
	k := setKey{queue, kind}
	if o, ok := i.opts.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	kvs := []attribute.KeyValue{AttrQueue.String(queue)}
	if kind != "" {
		kvs = append(kvs, AttrKind.String(kind))
	}
	o, _ := i.opts.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kvs...)))
	return o.(metric.MeasurementOption)
}

// New builds the instruments.
func New(opts Options) (*Instrumentation, error) {
	tp, mp, prop := opts.TracerProvider, opts.MeterProvider, opts.Propagator
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if prop == nil {
		prop = otel.GetTextMapPropagator()
		if len(prop.Fields()) == 0 {
			prop = propagation.TraceContext{}
		}
	}
	i := &Instrumentation{tracer: tp.Tracer(ScopeName), meter: mp.Meter(ScopeName), propagator: prop}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	i.enqueued, err = i.meter.Int64Counter("queuey.jobs.enqueued", metric.WithUnit("{job}"), metric.WithDescription("Jobs the broker confirmed."))
	add(err)
	i.enqueueDur, err = i.meter.Float64Histogram("queuey.enqueue.duration", metric.WithUnit("s"), metric.WithDescription("Time from an enqueue call's publish to its confirms."))
	add(err)
	i.settled, err = i.meter.Int64Counter("queuey.jobs.settled", metric.WithUnit("{job}"), metric.WithDescription("Deliveries settled, by outcome and dead-letter reason class."))
	add(err)
	i.duration, err = i.meter.Float64Histogram("queuey.job.duration", metric.WithUnit("s"), metric.WithDescription("Time a handler ran."))
	add(err)
	i.wait, err = i.meter.Float64Histogram("queuey.job.wait", metric.WithUnit("s"), metric.WithDescription("Time from when a job was to be runnable to the start of its run."))
	add(err)
	i.inFlight, err = i.meter.Int64UpDownCounter("queuey.jobs.in_flight", metric.WithUnit("{job}"), metric.WithDescription("Handler runs under way."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("queueyotel: create the instruments: %w", err)
	}
	return i, nil
}

// InstrumentProducer adds the producer middleware to o, outermost.
func (i *Instrumentation) InstrumentProducer(o *queuey.ProducerOptions) {
	o.Middleware = append([]queuey.ProducerMiddleware{i.ProducerMiddleware()}, o.Middleware...)
}

// InstrumentWorker adds the worker middleware to o, outermost, and counts
// settled deliveries, calling the OnSettled o already had after.
func (i *Instrumentation) InstrumentWorker(o *queuey.WorkerOptions) {
	o.Middleware = append([]queuey.WorkerMiddleware{i.WorkerMiddleware()}, o.Middleware...)
	prev := o.OnSettled
	o.OnSettled = func(s queuey.Settlement) {
		i.OnSettled(s)
		if prev != nil {
			prev(s)
		}
	}
}

// ProducerMiddleware traces and counts enqueue calls.
func (i *Instrumentation) ProducerMiddleware() queuey.ProducerMiddleware {
	return func(next queuey.EnqueueFunc) queuey.EnqueueFunc {
		return func(ctx context.Context, call *queuey.EnqueueCall) error {
			first := call.Jobs[0]
			attrs := make([]attribute.KeyValue, 0, 10)
			attrs = append(attrs,
				semconv.MessagingSystemRabbitMQ,
				semconv.MessagingOperationTypeSend,
				semconv.MessagingOperationName("enqueue"),
				semconv.MessagingDestinationName(first.WorkQueue),
				semconv.MessagingRabbitMQDestinationRoutingKey(first.WorkQueue),
				AttrQueue.String(first.WorkQueue),
			)
			if call.Batch {
				attrs = append(attrs, semconv.MessagingBatchMessageCount(len(call.Jobs)))
			} else {
				attrs = append(attrs, semconv.MessagingMessageID(first.ID), AttrKind.String(first.Type), AttrAttempt.Int(1))
				if first.CorrelationID != "" {
					attrs = append(attrs, semconv.MessagingMessageConversationID(first.CorrelationID))
				}
				if first.Delay > 0 {
					attrs = append(attrs, AttrDelayMs.Int64(first.Delay.Milliseconds()))
				}
			}
			ctx, span := i.tracer.Start(ctx, "send "+first.WorkQueue, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
			defer span.End()
			for _, j := range call.Jobs {
				if j.Headers == nil {
					j.Headers = amqp.Table{}
				}
				i.propagator.Inject(ctx, headerCarrier(j.Headers))
			}
			start := time.Now()
			err := next(ctx, call)
			i.enqueueDur.Record(ctx, time.Since(start).Seconds(), i.attrs(first.WorkQueue, ""))
			var batchErr *queuey.BatchError
			errors.As(err, &batchErr)
			for n, j := range call.Jobs {
				if err == nil || (batchErr != nil && batchErr.Errs[n] == nil) {
					i.enqueued.Add(ctx, 1, i.attrs(j.WorkQueue, j.Type))
				}
			}
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		}
	}
}

// WorkerMiddleware traces every handler run and measures it.
func (i *Instrumentation) WorkerMiddleware() queuey.WorkerMiddleware {
	return func(next queuey.JobHandler) queuey.JobHandler {
		return func(ctx context.Context, run *queuey.JobRun) error {
			start := time.Now()
			jc := run.Job
			producer := trace.SpanContextFromContext(i.propagator.Extract(context.Background(), headerCarrier(run.Headers)))
			opts := []trace.SpanStartOption{
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(
					semconv.MessagingSystemRabbitMQ,
					semconv.MessagingOperationTypeProcess,
					semconv.MessagingOperationName("process"),
					semconv.MessagingDestinationName(jc.Queue),
					semconv.MessagingRabbitMQDestinationRoutingKey(jc.Queue),
					semconv.MessagingMessageID(jc.ID),
					AttrKind.String(jc.Type),
					AttrAttempt.Int(jc.Attempt),
					AttrDeferrals.Int(jc.Deferrals),
					AttrPriority.Int(int(jc.Priority)),
				),
			}
			if jc.CorrelationID != "" {
				opts = append(opts, trace.WithAttributes(semconv.MessagingMessageConversationID(jc.CorrelationID)))
			}
			if producer.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: producer}))
			}
			ctx, span := i.tracer.Start(ctx, "process "+jc.Queue, opts...)
			defer span.End()
			queue, both := i.attrs(jc.Queue, ""), i.attrs(jc.Queue, jc.Type)
			if !run.ReadyAt.IsZero() {
				i.wait.Record(ctx, max(start.Sub(run.ReadyAt), 0).Seconds(), both)
			}
			i.inFlight.Add(ctx, 1, queue)
			defer i.inFlight.Add(ctx, -1, queue)
			err := next(ctx, run)
			i.duration.Record(ctx, time.Since(start).Seconds(), both)
			var deferral *queuey.DeferError
			switch {
			case errors.As(err, &deferral):
				// Not a failure: the job asked to run later.
				span.AddEvent("deferred", trace.WithAttributes(AttrDelayMs.Int64(deferral.Delay.Milliseconds()), AttrReason.String(deferral.Reason)))
			case err != nil:
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		}
	}
}

// OnSettled counts a settled delivery by its outcome; InstrumentWorker
// installs it.
func (i *Instrumentation) OnSettled(s queuey.Settlement) {
	o := s.Outcome
	outcome := outcomeName(o.Action)
	if s.Err != nil {
		outcome = "returned"
	}
	attrs := []attribute.KeyValue{
		AttrQueue.String(s.Queue),
		AttrKind.String(o.Job.Type),
		AttrOutcome.String(outcome),
		AttrReason.String(string(o.ReasonClass())),
	}
	i.settled.Add(s.Context, 1, metric.WithAttributes(attrs...))
}

func outcomeName(a queuey.Action) string {
	switch a {
	case queuey.ActionAck:
		return "acked"
	case queuey.ActionRetry:
		return "retried"
	case queuey.ActionDefer:
		return "deferred"
	case queuey.ActionDeadLetter:
		return "dead_lettered"
	case queuey.ActionRequeue:
		return "requeued"
	}
	return a.String()
}

// ObserveProducer reports p's Stats as the queuey.producer.* counters,
// until the registration it returns is unregistered.
func (i *Instrumentation) ObserveProducer(p *queuey.Producer) (metric.Registration, error) {
	var errs []error
	counter := func(name, desc string) metric.Int64ObservableCounter {
		c, err := i.meter.Int64ObservableCounter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	probes := counter("queuey.producer.divert_probes", "Divert probes the producer sent.")
	late := counter("queuey.producer.late_confirms", "Jobs confirmed too late after their divert probe, and sent again.")
	renewals := counter("queuey.producer.hold_renewals", "Hold queues declared again after a slow held confirm.")
	resends := counter("queuey.producer.hold_resends", "Held jobs sent again because their hold queue may have expired.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("queueyotel: create the producer's instruments: %w", err)
	}
	return i.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := p.Stats()
		o.ObserveInt64(probes, s.DivertProbes)
		o.ObserveInt64(late, s.LateConfirms)
		o.ObserveInt64(renewals, s.HoldRenewals)
		o.ObserveInt64(resends, s.HoldResends)
		return nil
	}, probes, late, renewals, resends)
}

// headerCarrier reads and writes trace context in AMQP headers.
type headerCarrier amqp.Table

func (c headerCarrier) Get(key string) string {
	switch v := c[key].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { c[key] = value }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
