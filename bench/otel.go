package main

import (
	"context"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/queuey/terraform-provider-queuey/runtime/queueyotel"
)

// discard is a span exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// instrumentation is queueyotel as the benchmark states it: a
// tracer provider that samples every span, through a batch processor into
// an exporter that discards, and a meter provider with a manual reader
// (aggregating every point, collected by no one). close shuts both down.
func instrumentation() (inst *queueyotel.Instrumentation, close func(), err error) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discard{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	close = func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	}
	inst, err = queueyotel.New(queueyotel.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		close()
		return nil, nil, err
	}
	return inst, close, nil
}
