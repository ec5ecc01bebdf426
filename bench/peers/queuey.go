package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// qjob is the job queuey's side runs.
type qjob struct{ payload }

func (qjob) Kind() string  { return "peer" }
func (qjob) Queue() string { return "jobs" }

type queueySys struct {
	c     config
	set   queuey.QueueSet
	p     *queuey.Producer
	conn  *amqp.Connection
	ch    *amqp.Channel
	probe probe
}

func newQueuey(ctx context.Context, c config) (system, error) {
	retry := queuey.FixedRetry(2, time.Second)
	s := &queueySys{c: c, set: queuey.QueueSet{
		Prefix: fmt.Sprintf("peers-%d", time.Now().UnixNano()),
		Queues: []queuey.QueueConfig{{Name: "jobs", Retry: &retry}},
	}}
	var err error
	if s.p, err = queuey.NewProducer(ctx, c.amqpURL, s.set, &queuey.ProducerOptions{Logger: quiet()}); err != nil {
		return nil, err
	}
	if s.conn, err = amqp.Dial(c.amqpURL); err != nil {
		s.p.Close()
		return nil, err
	}
	if s.ch, err = s.conn.Channel(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *queueySys) name() string { return "queuey" }

func (s *queueySys) settings() string {
	return "RabbitMQ 3.10 (Debian's package, default configuration), durable classic queue with x-max-priority 10, persistent messages, " +
		"every call returns after the broker's publisher confirm; `Producer` defaults (16 channels); the worker pool with prefetch and " +
		"concurrency 16; `FixedRetry(2, 1s)`; delays through hold queues (per-message TTL, dead-lettered back)"
}

func (s *queueySys) work() string { return s.set.Prefix + ".jobs" }

func (s *queueySys) purge() error {
	_, err := s.ch.QueuePurge(s.work(), false)
	return err
}

func (s *queueySys) enqueue(ctx context.Context, n, callers int) (float64, error) {
	defer s.purge()
	return concurrently(n, callers, func(i int) error {
		_, err := s.p.Enqueue(ctx, "jobs", "peer", payload{Seq: i}, nil)
		return err
	})
}

func (s *queueySys) batch(n int) []queuey.BatchJob {
	jobs := make([]queuey.BatchJob, n)
	for i := range jobs {
		jobs[i] = queuey.BatchJob{Queue: "jobs", JobType: "peer", Payload: payload{Seq: i}}
	}
	return jobs
}

func (s *queueySys) bulk(ctx context.Context, n int) (float64, error) {
	defer s.purge()
	jobs := s.batch(n)
	start := time.Now()
	if _, err := s.p.EnqueueBatch(ctx, jobs); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// pool starts a worker pool at concurrency conc; stop stops it.
func (s *queueySys) pool(ctx context.Context, conc int) (stop func(), err error) {
	workers := queuey.NewWorkers()
	queuey.AddWorker(workers, queuey.WorkFunc[qjob](func(_ context.Context, job *queuey.Job[qjob]) error {
		return s.probe.run(job.Args.payload, job.Attempt == 1)
	}))
	set := s.set
	set.Queues = []queuey.QueueConfig{set.Queues[0]}
	set.Queues[0].Prefetch = conc
	pool, err := queuey.NewWorkerPool(ctx, s.c.amqpURL, set, workers, &queuey.WorkerOptions{Concurrency: conc, Logger: quiet()})
	if err != nil {
		return nil, err
	}
	if err := pool.Start(); err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = pool.Stop(sctx)
	}, nil
}

func (s *queueySys) drain(ctx context.Context, n, conc int) (float64, error) {
	defer s.purge()
	if _, err := s.p.EnqueueBatch(ctx, s.batch(n)); err != nil {
		return 0, err
	}
	s.probe.arm(modeCount, n)
	start := time.Now()
	stop, err := s.pool(ctx, conc)
	if err != nil {
		return 0, err
	}
	defer stop()
	if _, err := s.probe.wait(ctx, 10*time.Minute); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func (s *queueySys) lateness(ctx context.Context, n int, delay time.Duration) ([]time.Duration, error) {
	s.probe.arm(modeLate, n)
	stop, err := s.pool(ctx, 16)
	if err != nil {
		return nil, err
	}
	defer stop()
	if err := spaced(n, func(i int) error {
		_, err := s.p.EnqueueAfter(ctx, "jobs", "peer", payload{Seq: i, At: time.Now().Add(delay).UnixNano()}, delay, nil)
		return err
	}); err != nil {
		return nil, err
	}
	return s.probe.wait(ctx, time.Minute+delay)
}

func (s *queueySys) retry(ctx context.Context, n int) ([]time.Duration, error) {
	s.probe.arm(modeRetry, n)
	stop, err := s.pool(ctx, 16)
	if err != nil {
		return nil, err
	}
	defer stop()
	for i := range n {
		if _, err := s.p.Enqueue(ctx, "jobs", "peer", payload{Seq: i}, nil); err != nil {
			return nil, err
		}
	}
	return s.probe.wait(ctx, time.Minute)
}

func (s *queueySys) close() {
	if s.p != nil {
		s.p.Close()
	}
	if s.ch != nil {
		for _, q := range []string{s.work(), s.work() + ".dead"} {
			_, _ = s.ch.QueueDelete(q, false, false, false)
		}
	}
	if s.conn != nil {
		_ = s.conn.Close()
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
