//go:build integration

package queuey_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// BenchmarkIntegrationWorker measures jobs handled per second from a backlog,
// side by side: raw amqp091-go (one consumer with the same prefetch, decode
// the envelope, ack) and a WorkerPool with a handler that does nothing
// (decode, dispatch, ack). The ratio of the two ns/op is the cost of the
// pool. Run with
//
//	go test -tags integration ./runtime/ -run '^$' -bench IntegrationWorker -benchtime 5000x
func BenchmarkIntegrationWorker(b *testing.B) {
	const prefetch = 16
	fill := func(b *testing.B, e *wkEnv, set queuey.QueueSet, n int) {
		b.Helper()
		p := e.producer(set)
		for start := 0; start < n; start += 1000 {
			batch := make([]queuey.BatchJob, min(1000, n-start))
			for i := range batch {
				batch[i] = queuey.BatchJob{Queue: "jobs", JobType: wkOK{}.Kind(), Payload: wkOK{wkArgs{ID: start + i}}}
			}
			if _, err := p.EnqueueBatch(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
		}
	}

	b.Run("raw-amqp091", func(b *testing.B) {
		e := wkSetup(b, "bench-raw")
		set := e.set(queuey.QueueConfig{Name: "jobs", Prefetch: prefetch})
		fill(b, e, set, b.N)
		ch, err := e.conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		defer ch.Close()
		if err := ch.Qos(prefetch, 0, false); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		deliveries, err := ch.Consume(set.WorkQueue("jobs"), "", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		for range b.N {
			d := <-deliveries
			var env queuey.Envelope
			if err := json.Unmarshal(d.Body, &env); err != nil {
				b.Fatal(err)
			}
			if err := d.Ack(false); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	})

	b.Run("queuey-pool", func(b *testing.B) {
		e := wkSetup(b, "bench-pool")
		set := e.set(queuey.QueueConfig{Name: "jobs", Prefetch: prefetch})
		fill(b, e, set, b.N)
		var done atomic.Int64
		all := make(chan struct{})
		ws := queuey.NewWorkers()
		queuey.AddWorker(ws, queuey.WorkFunc[wkOK](func(context.Context, *queuey.Job[wkOK]) error {
			if done.Add(1) == int64(b.N) {
				close(all)
			}
			return nil
		}))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool, err := queuey.NewWorkerPool(ctx, wkAMQPURL(), set, ws, &queuey.WorkerOptions{Logger: wkQuiet()})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		if err := pool.Start(); err != nil {
			b.Fatal(err)
		}
		select {
		case <-all:
		case <-time.After(5 * time.Minute):
			b.Fatalf("handled %d of %d jobs", done.Load(), b.N)
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		if err := pool.Stop(ctx); err != nil {
			b.Fatal(err)
		}
	})
}
