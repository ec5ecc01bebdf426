package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// riverArgs is the job river's side runs.
type riverArgs struct{ payload }

func (riverArgs) Kind() string { return "peer" }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	probe *probe
}

func (w *riverWorker) Work(_ context.Context, job *river.Job[riverArgs]) error {
	return w.probe.run(job.Args.payload, job.Attempt == 1)
}

// oneSecond retries every failed job 1 s after its attempt.
type oneSecond struct{}

func (oneSecond) NextRetry(job *rivertype.JobRow) time.Time {
	return time.Now().Add(time.Second)
}

type riverSys struct {
	c        config
	cooldown time.Duration // 0: river's default
	pool     *pgxpool.Pool
	inserter *river.Client[pgx.Tx]
	probe    probe
}

// newRiver connects to the database (creating it when absent), migrates
// river's tables up and empties its job table.
func newRiver(ctx context.Context, c config, cooldown time.Duration) (system, error) {
	if err := createDatabase(ctx, c.postgresURL); err != nil {
		return nil, err
	}
	pool, err := sharedPool(ctx, c)
	if err != nil {
		return nil, err
	}
	s := &riverSys{c: c, cooldown: cooldown, pool: pool}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("migrate river's tables: %w", err)
	}
	if s.inserter, err = river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: quiet()}); err != nil {
		return nil, err
	}
	return s, s.reset(ctx)
}

// pools holds the connection pool both river systems share: PostgreSQL's
// default of 100 connections does not fit two.
var pools = map[string]*pgxpool.Pool{}

// sharedPool opens (once) a pool with a connection for every caller and
// worker, and opens them all before any figure runs: pgx's default pool (4
// connections on this machine) would make 64 callers wait for a
// connection, not for the database.
func sharedPool(ctx context.Context, c config) (*pgxpool.Pool, error) {
	if p, ok := pools[c.postgresURL]; ok {
		return p, nil
	}
	cfg, err := pgxpool.ParseConfig(c.postgresURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(max(c.callers, c.concurrency) + 8)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	conns := make([]*pgxpool.Conn, cfg.MaxConns)
	for i := range conns {
		if conns[i], err = pool.Acquire(ctx); err != nil {
			pool.Close()
			return nil, fmt.Errorf("open %d connections to PostgreSQL: %w (its max_connections may be lower)", cfg.MaxConns, err)
		}
	}
	for _, conn := range conns {
		conn.Release()
	}
	pools[c.postgresURL] = pool
	return pool, nil
}

// createDatabase creates the database of dsn unless it exists.
func createDatabase(ctx context.Context, dsn string) error {
	u, err := url.Parse(dsn)
	if err != nil {
		return err
	}
	name := strings.TrimPrefix(u.Path, "/")
	u.Path = "/postgres"
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL at %s: %w", u.Host, err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

func (s *riverSys) name() string {
	if s.cooldown > 0 {
		return fmt.Sprintf("river, fetch cooldown %v", s.cooldown)
	}
	return "river"
}

func (s *riverSys) settings() string {
	cool := "the default fetch cooldown (100 ms: a producer fetches at most every 100 ms)"
	if s.cooldown > 0 {
		cool = fmt.Sprintf("fetch cooldown %v (the minimum river accepts)", s.cooldown)
	}
	return fmt.Sprintf("v0.51.2, riverpgxv5 on PostgreSQL 15 (Debian's package, synchronous_commit on: an insert returns after the WAL is flushed), "+
		"pgxpool of %d connections; MaxWorkers 16; %s, the default fetch poll interval (1 s) and job scheduler interval (5 s, which moves due "+
		"scheduled and retryable jobs to available); a retry policy of 1 s; `Insert` per job, `InsertMany` (COPY) for the bulk", s.pool.Config().MaxConns, cool)
}

func (s *riverSys) reset(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, "TRUNCATE river_job")
	return err
}

func (s *riverSys) enqueue(ctx context.Context, n, callers int) (float64, error) {
	defer s.reset(ctx)
	return concurrently(n, callers, func(i int) error {
		_, err := s.inserter.Insert(ctx, riverArgs{payload{Seq: i}}, nil)
		return err
	})
}

func (s *riverSys) many(n int) []river.InsertManyParams {
	p := make([]river.InsertManyParams, n)
	for i := range p {
		p[i] = river.InsertManyParams{Args: riverArgs{payload{Seq: i}}}
	}
	return p
}

func (s *riverSys) bulk(ctx context.Context, n int) (float64, error) {
	defer s.reset(ctx)
	params := s.many(n)
	start := time.Now()
	if _, err := s.inserter.InsertMany(ctx, params); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// work starts a client that works jobs at concurrency conc; stop stops it.
func (s *riverSys) work(ctx context.Context, conc int) (stop func(), err error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{probe: &s.probe})
	client, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: conc}},
		Workers:       workers,
		FetchCooldown: s.cooldown,
		RetryPolicy:   oneSecond{},
		Logger:        quiet(),
	})
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}, nil
}

func (s *riverSys) drain(ctx context.Context, n, conc int) (float64, error) {
	defer s.reset(ctx)
	if _, err := s.inserter.InsertMany(ctx, s.many(n)); err != nil {
		return 0, err
	}
	s.probe.arm(modeCount, n)
	start := time.Now()
	stop, err := s.work(ctx, conc)
	if err != nil {
		return 0, err
	}
	defer stop()
	if _, err := s.probe.wait(ctx, 10*time.Minute); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func (s *riverSys) lateness(ctx context.Context, n int, delay time.Duration) ([]time.Duration, error) {
	defer s.reset(ctx)
	s.probe.arm(modeLate, n)
	stop, err := s.work(ctx, 16)
	if err != nil {
		return nil, err
	}
	defer stop()
	if err := spaced(n, func(i int) error {
		at := time.Now().Add(delay)
		_, err := s.inserter.Insert(ctx, riverArgs{payload{Seq: i, At: at.UnixNano()}}, &river.InsertOpts{ScheduledAt: at})
		return err
	}); err != nil {
		return nil, err
	}
	return s.probe.wait(ctx, time.Minute+delay)
}

func (s *riverSys) retry(ctx context.Context, n int) ([]time.Duration, error) {
	defer s.reset(ctx)
	s.probe.arm(modeRetry, n)
	stop, err := s.work(ctx, 16)
	if err != nil {
		return nil, err
	}
	defer stop()
	for i := range n {
		if _, err := s.inserter.Insert(ctx, riverArgs{payload{Seq: i}}, &river.InsertOpts{MaxAttempts: 2}); err != nil {
			return nil, err
		}
	}
	return s.probe.wait(ctx, time.Minute)
}

func (s *riverSys) close() {
	_ = s.reset(context.Background())
	if p, ok := pools[s.c.postgresURL]; ok && p == s.pool {
		delete(pools, s.c.postgresURL)
		p.Close()
	}
}
