//go:build integration

package queuey

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// BenchmarkIntegrationEnqueue measures confirmed enqueues against the real
// broker: one goroutine at a time, many goroutines over pools of different
// sizes, and batches. Run with
//
//	go test -tags integration ./runtime/ -run '^$' -bench Enqueue
func BenchmarkIntegrationEnqueue(b *testing.B) {
	payload := map[string]string{"to": "ada@example.com"}
	setup := func(b *testing.B, channels int) *Producer {
		tb := newTestBroker(b)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := NewProducer(ctx, tb.url, QueueSet{Prefix: tb.prefix, Queues: []QueueConfig{{Name: "jobs"}}}, &ProducerOptions{Channels: channels})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Close() })
		return p
	}

	b.Run("serial", func(b *testing.B) {
		p := setup(b, 1)
		ctx := context.Background()
		for b.Loop() {
			if _, err := p.Enqueue(ctx, "jobs", "bench", payload, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, channels := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("parallel/channels=%d", channels), func(b *testing.B) {
			p := setup(b, channels)
			ctx := context.Background()
			b.SetParallelism(8) // goroutines per GOMAXPROCS
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := p.Enqueue(ctx, "jobs", "bench", payload, nil); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	// The same work done with amqp091-go alone, for ratios: a mandatory,
	// persistent publish of the same body to the same kind of queue,
	// waiting for its confirm. Each parallel goroutine has a channel.
	raw := func(b *testing.B) (*testBroker, string, []byte) {
		tb := newTestBroker(b)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := NewProducer(ctx, tb.url, QueueSet{Prefix: tb.prefix, Queues: []QueueConfig{{Name: "jobs"}}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		_ = p.Close()
		env, _ := p.newEnvelope("jobs", "bench", payload, nil)
		msg, _ := newPublishing(env, true, nil)
		return tb, tb.name("jobs"), msg.Body
	}
	rawPublish := func(b *testing.B, ch *amqp.Channel, queue string, body []byte) {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body,
			Headers: amqp.Table{"x-deferrals": int64(0), "x-attempt": int64(1)},
		})
		if err != nil {
			b.Error(err)
			return
		}
		if !dc.Wait() {
			b.Error("nacked")
		}
	}
	confirmChannel := func(b *testing.B, tb *testBroker) *amqp.Channel {
		ch := tb.channel()
		if err := ch.Confirm(false); err != nil {
			b.Fatal(err)
		}
		return ch
	}
	b.Run("raw-amqp091/serial", func(b *testing.B) {
		tb, queue, body := raw(b)
		ch := confirmChannel(b, tb)
		for b.Loop() {
			rawPublish(b, ch, queue, body)
		}
	})
	b.Run("raw-amqp091/parallel", func(b *testing.B) {
		tb, queue, body := raw(b)
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			ch := confirmChannel(b, tb)
			for pb.Next() {
				rawPublish(b, ch, queue, body)
			}
		})
	})
	b.Run("batch-of-100", func(b *testing.B) {
		p := setup(b, 1)
		ctx := context.Background()
		jobs := make([]BatchJob, 100)
		for i := range jobs {
			jobs[i] = BatchJob{Queue: "jobs", JobType: "bench", Payload: payload}
		}
		for b.Loop() {
			if _, err := p.EnqueueBatch(ctx, jobs); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(jobs)), "ns/job")
	})
}
