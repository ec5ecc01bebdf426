package queueyotel_test

import (
	"context"
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/queueyotel"
)

// Job metrics for Prometheus: the exporter is a reader of a meter provider,
// the instrumentation is middleware and a settled hook added to the options
// before the producer and the pool are built. Traces go to the global
// tracer provider unless Options.TracerProvider names another. It needs a
// broker, so it has no Output to check.
func Example_prometheus() {
	exporter, err := otelprom.New()
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	inst, err := queueyotel.New(queueyotel.Options{MeterProvider: mp})
	if err != nil {
		log.Fatal(err)
	}
	popts, wopts := &queuey.ProducerOptions{}, &queuey.WorkerOptions{}
	inst.InstrumentProducer(popts)
	inst.InstrumentWorker(wopts)
	http.Handle("/metrics", promhttp.Handler())

	ctx := context.Background()
	set := queuey.QueueSet{Prefix: "myapp", Queues: []queuey.QueueConfig{{Name: "emails"}}}
	p, err := queuey.NewProducer(ctx, "amqp://guest:guest@127.0.0.1:5672/", set, popts)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if _, err := inst.ObserveProducer(p); err != nil {
		log.Fatal(err)
	}
	pool, err := queuey.NewWorkerPool(ctx, "amqp://guest:guest@127.0.0.1:5672/", set, queuey.NewWorkers(), wopts)
	if err != nil {
		log.Fatal(err)
	}
	go func() { log.Fatal(http.ListenAndServe("127.0.0.1:9464", nil)) }()
	log.Fatal(pool.Run(ctx))
}
