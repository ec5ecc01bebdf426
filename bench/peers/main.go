// Command peers measures queuey beside the job queues its users pick
// instead, river (on PostgreSQL) and asynq (on Redis), on the same figures,
// in one run, on one machine: enqueue from 1 and from 64 callers, a bulk
// enqueue, draining a backlog at concurrency 16, the lateness of a 2 s
// delay, and the round trip of a retry after 1 s.
//
// It lives in a module of its own so that queuey's module never depends on
// river or asynq. `make bench` runs it after the main bench; alone:
//
//	cd bench/peers && go run . -runs 3 -out ../results/peers.md
//
// Every system runs with its defaults except where a figure needs a
// setting (a retry delay of 1 s, a concurrency of 16); the report lists
// every setting and the fairness notes beside the figures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"
)

// config is what the flags set.
type config struct {
	runs        int
	serialJobs  int
	callerJobs  int
	callers     int
	bulkJobs    int
	drainJobs   int
	concurrency int
	lateJobs    int
	delay       time.Duration
	retryJobs   int
	amqpURL     string
	postgresURL string
	redisAddr   string
	redisDB     int
	fsyncPort   int
	only        string
	out         string
}

func main() {
	var c config
	flag.IntVar(&c.runs, "runs", 3, "repetitions of every figure; each figure is the median")
	flag.IntVar(&c.serialJobs, "serial-jobs", 1000, "jobs per run of the 1-caller enqueue")
	flag.IntVar(&c.callerJobs, "caller-jobs", 5000, "jobs per run of the many-caller enqueue")
	flag.IntVar(&c.callers, "callers", 64, "callers of the many-caller enqueue")
	flag.IntVar(&c.bulkJobs, "bulk-jobs", 10000, "jobs of one bulk enqueue")
	flag.IntVar(&c.drainJobs, "drain-jobs", 10000, "backlog a worker drains")
	flag.IntVar(&c.concurrency, "concurrency", 16, "handlers at once while draining")
	flag.IntVar(&c.lateJobs, "late-jobs", 50, "delayed jobs per run of the lateness figure, 20 ms apart")
	flag.DurationVar(&c.delay, "delay", 2*time.Second, "delay of the lateness figure")
	flag.IntVar(&c.retryJobs, "retry-jobs", 20, "jobs per run of the retry figure, each failing once")
	flag.StringVar(&c.amqpURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ for queuey")
	flag.StringVar(&c.postgresURL, "postgres", "postgres://postgres@127.0.0.1:5432/queuey_peers?sslmode=disable", "PostgreSQL database for river (created when absent)")
	flag.StringVar(&c.redisAddr, "redis", "127.0.0.1:6379", "Redis for asynq without fsync (the machine's)")
	flag.IntVar(&c.redisDB, "redis-db", 9, "Redis database asynq uses (flushed between runs)")
	flag.IntVar(&c.fsyncPort, "fsync-redis-port", 6391, "port of the private Redis with appendfsync always that the bench starts and stops (0: skip it)")
	flag.StringVar(&c.only, "only", "", "comma-separated systems to run (queuey,river,river-1ms,asynq,asynq-fsync); default all")
	flag.StringVar(&c.out, "out", "", "also write the report (Markdown) to this file")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("peers: ")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := run(ctx, c)
	if err != nil {
		log.Fatal(err)
	}
	md := rep.markdown()
	fmt.Print(md)
	if c.out != "" {
		if err := os.WriteFile(c.out, []byte(md), 0o644); err != nil {
			log.Fatal(err)
		}
		log.Printf("report written to %s", c.out)
	}
}

// system is one job queue under test. Each method runs one repetition of a
// figure from an empty queue and leaves the queue empty.
type system interface {
	// name is the column's heading.
	name() string
	// settings says how it was configured, for the report.
	settings() string
	// enqueue puts n jobs in from callers goroutines; jobs/s.
	enqueue(ctx context.Context, n, callers int) (float64, error)
	// bulk puts n jobs in with one call of the system's bulk API; jobs/s.
	// errUnsupported when it has none.
	bulk(ctx context.Context, n int) (float64, error)
	// drain fills a backlog of n, then times a worker at concurrency conc
	// through it; jobs/s.
	drain(ctx context.Context, n, conc int) (float64, error)
	// lateness runs n jobs delayed by delay, 20 ms apart, with a worker
	// running; how late each started.
	lateness(ctx context.Context, n int, delay time.Duration) ([]time.Duration, error)
	// retry runs n jobs that fail once, to be retried 1 s later; the time
	// from each first run's start to its second's.
	retry(ctx context.Context, n int) ([]time.Duration, error)
	close()
}

func run(ctx context.Context, c config) (*report, error) {
	rep := &report{start: time.Now(), loadBefore: loadAvg(), config: c}
	builders := []struct {
		key string
		new func(context.Context, config) (system, error)
	}{
		{"queuey", newQueuey},
		{"river", func(ctx context.Context, c config) (system, error) { return newRiver(ctx, c, 0) }},
		{"river-1ms", func(ctx context.Context, c config) (system, error) { return newRiver(ctx, c, time.Millisecond) }},
		{"asynq", func(ctx context.Context, c config) (system, error) { return newAsynq(ctx, c, c.redisAddr, "no fsync") }},
		{"asynq-fsync", newAsynqFsync},
	}
	var systems []system
	defer func() {
		for _, s := range systems {
			s.close()
		}
	}()
	for _, b := range builders {
		if !selected(c.only, b.key) || (b.key == "asynq-fsync" && c.fsyncPort == 0) {
			continue
		}
		log.Printf("%s: setting up", b.key)
		s, err := b.new(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.key, err)
		}
		systems = append(systems, s)
		rep.columns = append(rep.columns, &column{name: s.name(), settings: s.settings(), rates: map[string][]float64{}, durs: map[string][]time.Duration{}})
	}
	// Every repetition runs every system, the order rotating by one each
	// time, so that a burst of load from elsewhere does not always land on
	// the same one.
	for r := range c.runs {
		for k := range systems {
			i := (k + r) % len(systems)
			if err := measureOnce(ctx, c, systems[i], rep.columns[i], r); err != nil {
				return nil, fmt.Errorf("%s: %w", systems[i].name(), err)
			}
		}
	}
	rep.took = time.Since(rep.start)
	rep.loadAfter = loadAvg()
	return rep, nil
}

// measureOnce runs every figure of s once, into col.
func measureOnce(ctx context.Context, c config, s system, col *column, run int) error {
	rate := func(figure string, f func() (float64, error)) error {
		r, err := f()
		if errors.Is(err, errUnsupported) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s, run %d: %w", figure, run+1, err)
		}
		log.Printf("run %d/%d %-24s %-34s %.0f jobs/s", run+1, c.runs, s.name(), figure, r)
		col.rates[figure] = append(col.rates[figure], r)
		return nil
	}
	times := func(figure string, f func() ([]time.Duration, error)) error {
		d, err := f()
		if err != nil {
			return fmt.Errorf("%s, run %d: %w", figure, run+1, err)
		}
		log.Printf("run %d/%d %-24s %-34s p50 %v p99 %v", run+1, c.runs, s.name(), figure, percentile(d, 50), percentile(d, 99))
		col.durs[figure] = append(col.durs[figure], d...)
		return nil
	}
	for _, step := range []func() error{
		func() error {
			return rate(figSerial, func() (float64, error) { return s.enqueue(ctx, c.serialJobs, 1) })
		},
		func() error {
			return rate(figCallers, func() (float64, error) { return s.enqueue(ctx, c.callerJobs, c.callers) })
		},
		func() error { return rate(figBulk, func() (float64, error) { return s.bulk(ctx, c.bulkJobs) }) },
		func() error {
			return rate(figDrain, func() (float64, error) { return s.drain(ctx, c.drainJobs, c.concurrency) })
		},
		func() error {
			return times(figLate, func() ([]time.Duration, error) { return s.lateness(ctx, c.lateJobs, c.delay) })
		},
		func() error {
			return times(figRetry, func() ([]time.Duration, error) { return s.retry(ctx, c.retryJobs) })
		},
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}
