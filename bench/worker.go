package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// noopArgs is the job of the worker figures; its handler does nothing.
type noopArgs struct {
	To string `json:"to"`
}

func (noopArgs) Kind() string  { return noopKind }
func (noopArgs) Queue() string { return "jobs" }

// lateArgs is the job of the lateness figures: it carries the moment it was
// asked to run at.
type lateArgs struct {
	DueNs int64 `json:"due_ns"`
}

const lateKind = "bench.late"

func (lateArgs) Kind() string  { return lateKind }
func (lateArgs) Queue() string { return "jobs" }

// workerSection: jobs handled per second from a backlog by a WorkerPool
// with a no-op handler, beside one amqp091-go consumer that acks, at the
// same prefetch.
func (b *bench) workerSection(ctx context.Context) error {
	set := queuey.QueueSet{Prefix: b.name("worker"), Queues: []queuey.QueueConfig{{Name: "jobs"}}}
	work := set.WorkQueue("jobs")
	// Declare the set the way queuey does, once.
	p, err := queuey.NewProducer(ctx, b.c.amqpURL, set, &queuey.ProducerOptions{Logger: quiet()})
	if err != nil {
		return err
	}
	_ = p.Close()
	fillCh, err := b.confirmChannels(1)
	if err != nil {
		return err
	}
	defer closeAll(fillCh)
	msg := rawMessage(work)
	n := b.c.workerJobs
	fill := func(ctx context.Context) error {
		if err := b.purge(work); err != nil {
			return err
		}
		return rawPipelined(ctx, fillCh[0], work, msg, n, rawWindow)
	}

	inst, closeOtel, err := instrumentation()
	if err != nil {
		return err
	}
	defer closeOtel()
	// queueyRun is the pool at prefetch; with otel, instrumented by
	// queueyotel.
	queueyRun := func(prefetch int, otel bool) func(ctx context.Context) (map[string]float64, error) {
		return func(ctx context.Context) (map[string]float64, error) {
			if err := fill(ctx); err != nil {
				return nil, err
			}
			defer b.purge(work)
			var done atomic.Int64
			all := make(chan struct{})
			ws := queuey.NewWorkers()
			queuey.AddWorker(ws, queuey.WorkFunc[noopArgs](func(context.Context, *queuey.Job[noopArgs]) error {
				if done.Add(1) == int64(n) {
					close(all)
				}
				return nil
			}))
			pset := set
			pset.Queues = []queuey.QueueConfig{{Name: "jobs", Prefetch: prefetch}}
			opts := &queuey.WorkerOptions{Logger: quiet()}
			if otel {
				inst.InstrumentWorker(opts)
			}
			pool, err := queuey.NewWorkerPool(ctx, b.c.amqpURL, pset, ws, opts)
			if err != nil {
				return nil, err
			}
			t := startTimer()
			if err := pool.Start(); err != nil {
				return nil, err
			}
			var werr error
			select {
			case <-all:
			case <-time.After(5 * time.Minute):
				werr = fmt.Errorf("handled %d of %d jobs in 5 min", done.Load(), n)
			case <-ctx.Done():
				werr = ctx.Err()
			}
			m := t.stop(n)
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := pool.Stop(stopCtx); err != nil && werr == nil {
				werr = err
			}
			return m, werr
		}
	}
	rawRun := func(prefetch int) func(ctx context.Context) (map[string]float64, error) {
		return func(ctx context.Context) (map[string]float64, error) {
			if err := fill(ctx); err != nil {
				return nil, err
			}
			defer b.purge(work)
			ch, err := b.raw.Channel()
			if err != nil {
				return nil, err
			}
			defer ch.Close()
			t := startTimer()
			if err := ch.Qos(prefetch, 0, false); err != nil {
				return nil, err
			}
			deliveries, err := ch.Consume(work, "", false, false, false, false, nil)
			if err != nil {
				return nil, err
			}
			timeout := time.After(5 * time.Minute)
			for i := range n {
				select {
				case d, ok := <-deliveries:
					if !ok {
						return nil, errors.New("consumer closed")
					}
					if err := d.Ack(false); err != nil {
						return nil, err
					}
				case <-timeout:
					return nil, fmt.Errorf("consumed %d of %d jobs in 5 min", i, n)
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return t.stop(n), nil
		}
	}
	s, err := measure(ctx, b.c.runs, []variant{
		{"queuey pool prefetch 16", queueyRun(16, false)},
		{"queuey pool prefetch 16 + otel", queueyRun(16, true)},
		{"raw consume+ack prefetch 16", rawRun(16)},
		{"queuey pool prefetch 128", queueyRun(128, false)},
		{"raw consume+ack prefetch 128", rawRun(128)},
	})
	if err != nil {
		return err
	}
	for _, pf := range []int{16, 128} {
		b.report.add(s, "worker", fmt.Sprintf("no-op handler, prefetch %d, backlog of %d", pf, n), "jobs/s",
			fmt.Sprintf("queuey pool prefetch %d", pf), "rate", fmt.Sprintf("raw consume+ack prefetch %d", pf), "rate",
			"amqp091-go consume + ack, 1 consumer", true, 0.95) // issue 21's targets
		b.report.add(s, "worker", fmt.Sprintf("CPU of this process per job, prefetch %d", pf), "µs/job",
			fmt.Sprintf("queuey pool prefetch %d", pf), "cpu", fmt.Sprintf("raw consume+ack prefetch %d", pf), "cpu",
			"amqp091-go consume + ack, 1 consumer", false, 1.25)
		b.report.add(s, "worker", fmt.Sprintf("heap allocations of this process per job, prefetch %d", pf), "allocs/job",
			fmt.Sprintf("queuey pool prefetch %d", pf), "allocs", fmt.Sprintf("raw consume+ack prefetch %d", pf), "allocs",
			"amqp091-go consume + ack, 1 consumer", false, 0)
	}
	b.report.add(s, "worker", "with queueyotel (every span sampled, batch processor, discarding exporter; manual metric reader), prefetch 16", "jobs/s",
		"queuey pool prefetch 16 + otel", "rate", "queuey pool prefetch 16", "rate", "the same queuey pool without it", true, 0.9)
	b.report.add(s, "worker", "with queueyotel, beside raw, prefetch 16", "jobs/s",
		"queuey pool prefetch 16 + otel", "rate", "raw consume+ack prefetch 16", "rate", "amqp091-go consume + ack, 1 consumer", true, 0)
	b.report.add(s, "worker", "CPU per job with queueyotel, prefetch 16", "µs/job",
		"queuey pool prefetch 16 + otel", "cpu", "queuey pool prefetch 16", "cpu", "the same queuey pool without it", false, 0)
	return nil
}

// latenessSection: how much later than requested a delayed job reaches its
// handler, for delays of 1 s and 5 s (whole steps of the default 1 s
// granularity, so rounding adds nothing), beside a raw amqp091-go hold
// queue with the same arguments and a raw consumer.
func (b *bench) latenessSection(ctx context.Context) error {
	set := queuey.QueueSet{Prefix: b.name("late"), Queues: []queuey.QueueConfig{{Name: "jobs"}}}
	work := set.WorkQueue("jobs")
	p, err := queuey.NewProducer(ctx, b.c.amqpURL, set, &queuey.ProducerOptions{Logger: quiet()})
	if err != nil {
		return err
	}
	defer p.Close()
	chs, err := b.confirmChannels(1)
	if err != nil {
		return err
	}
	defer closeAll(chs)
	k := b.c.lateJobs

	// collector gathers lateness samples until k have arrived.
	type collector struct {
		mu   sync.Mutex
		late []float64
		all  chan struct{}
	}
	newCollector := func() *collector { return &collector{all: make(chan struct{})} }
	record := func(c *collector, dueNs int64) {
		l := float64(time.Now().UnixNano()-dueNs) / 1e6
		c.mu.Lock()
		defer c.mu.Unlock()
		c.late = append(c.late, l)
		if len(c.late) == k {
			close(c.all)
		}
	}
	finish := func(ctx context.Context, c *collector, d time.Duration) (map[string]float64, error) {
		select {
		case <-c.all:
		case <-time.After(d + 60*time.Second):
			c.mu.Lock()
			defer c.mu.Unlock()
			return nil, fmt.Errorf("%d of %d delayed jobs arrived", len(c.late), k)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return map[string]float64{
			"p50": quantile(c.late, 0.5),
			"p99": quantile(c.late, 0.99),
			"max": quantile(c.late, 1),
		}, nil
	}

	queueyRun := func(d time.Duration) func(ctx context.Context) (map[string]float64, error) {
		return func(ctx context.Context) (map[string]float64, error) {
			c := newCollector()
			ws := queuey.NewWorkers()
			queuey.AddWorker(ws, queuey.WorkFunc[lateArgs](func(_ context.Context, j *queuey.Job[lateArgs]) error {
				record(c, j.Args.DueNs)
				return nil
			}))
			pool, err := queuey.NewWorkerPool(ctx, b.c.amqpURL, set, ws, &queuey.WorkerOptions{Logger: quiet(), Producer: p})
			if err != nil {
				return nil, err
			}
			if err := pool.Start(); err != nil {
				return nil, err
			}
			defer func() {
				stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = pool.Stop(stopCtx)
			}()
			for range k {
				due := time.Now().Add(d)
				if _, err := p.EnqueueAfter(ctx, "jobs", lateKind, lateArgs{DueNs: due.UnixNano()}, d, nil); err != nil {
					return nil, err
				}
				time.Sleep(b.c.lateInterval)
			}
			return finish(ctx, c, d)
		}
	}
	rawRun := func(d time.Duration) func(ctx context.Context) (map[string]float64, error) {
		return func(ctx context.Context) (map[string]float64, error) {
			c := newCollector()
			ch, err := b.raw.Channel()
			if err != nil {
				return nil, err
			}
			defer ch.Close()
			if err := ch.Qos(queuey.DefaultPrefetch, 0, false); err != nil {
				return nil, err
			}
			deliveries, err := ch.Consume(work, "", false, false, false, false, nil)
			if err != nil {
				return nil, err
			}
			go func() {
				for dl := range deliveries {
					var env struct {
						Payload lateArgs `json:"payload"`
					}
					if json.Unmarshal(dl.Body, &env) == nil {
						record(c, env.Payload.DueNs)
					}
					_ = dl.Ack(false)
				}
			}()
			ttl, err := topology.HoldTTL(d, topology.DefaultGranularity)
			if err != nil {
				return nil, err
			}
			hold := topology.HoldName(work, ttl)
			for range k {
				due := time.Now().Add(d)
				msg := rawMessage(work)
				pl, _ := json.Marshal(lateArgs{DueNs: due.UnixNano()})
				msg.Body, _ = json.Marshal(queuey.Envelope{JobID: msg.MessageId, JobType: lateKind, Queue: work, Attempt: 1, EnqueuedAtMs: time.Now().UnixMilli(), Payload: pl})
				msg.Type = lateKind
				if _, err := chs[0].QueueDeclare(hold, true, false, false, false, amqp.Table(topology.HoldArgs(work, ttl))); err != nil {
					return nil, err
				}
				if err := rawPublish(ctx, chs[0], hold, msg); err != nil {
					return nil, err
				}
				time.Sleep(b.c.lateInterval)
			}
			return finish(ctx, c, d)
		}
	}
	s, err := measure(ctx, b.c.runs, []variant{
		{"queuey EnqueueAfter 1s", queueyRun(time.Second)},
		{"raw hold queue 1s", rawRun(time.Second)},
		{"queuey EnqueueAfter 5s", queueyRun(5 * time.Second)},
		{"raw hold queue 5s", rawRun(5 * time.Second)},
	})
	if err != nil {
		return err
	}
	limit := float64((topology.DefaultGranularity + 250*time.Millisecond).Milliseconds())
	for _, d := range []string{"1s", "5s"} {
		for _, m := range []string{"p50", "p99", "max"} {
			b.report.add(s, "lateness", fmt.Sprintf("delay %s: lateness %s", d, m), "ms",
				"queuey EnqueueAfter "+d, m, "raw hold queue "+d, m, "amqp091-go hold queue + consumer", false, 0)
			if m == "p99" {
				r := &b.report.rows[len(b.report.rows)-1]
				r.target = fmt.Sprintf("≤ %.0f ms (granularity + 250 ms)", limit)
				r.met = yesNo(r.queuey <= limit)
			}
		}
	}
	return nil
}
