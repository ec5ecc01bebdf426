package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

const asynqQueue = "peers"

type asynqSys struct {
	c          config
	addr, mode string
	client     *asynq.Client
	rdb        *redis.Client
	probe      probe
	// private is the Redis server this system started (fsync always), with
	// its directory; nil for the machine's.
	private *exec.Cmd
	dir     string
}

func newAsynq(ctx context.Context, c config, addr, mode string) (system, error) {
	s := &asynqSys{c: c, addr: addr, mode: mode}
	s.rdb = redis.NewClient(&redis.Options{Addr: addr, DB: c.redisDB})
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		s.rdb.Close()
		return nil, fmt.Errorf("Redis at %s: %w", addr, err)
	}
	s.client = asynq.NewClient(s.opt())
	return s, s.reset(ctx)
}

// newAsynqFsync starts a private Redis that writes every command to its
// append-only file and fsyncs it before answering (the durability a
// publisher confirm of a persistent message gives), and runs asynq on it.
func newAsynqFsync(ctx context.Context, c config) (system, error) {
	dir, err := os.MkdirTemp("", "queuey-peers-redis-")
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(c.fsyncPort)
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port, "--dir", dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", dir+"/redis.log")
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server (Debian's package redis-server): %w", err)
	}
	stopRedis := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	addr := "127.0.0.1:" + port
	probeClient := redis.NewClient(&redis.Options{Addr: addr})
	defer probeClient.Close()
	deadline := time.Now().Add(10 * time.Second)
	for probeClient.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			stopRedis()
			return nil, fmt.Errorf("the private Redis on %s did not answer within 10 s (see %s/redis.log)", addr, dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sys, err := newAsynq(ctx, c, addr, "fsync always")
	if err != nil {
		stopRedis()
		return nil, err
	}
	s := sys.(*asynqSys)
	s.private, s.dir = cmd, dir
	return s, nil
}

func (s *asynqSys) opt() asynq.RedisClientOpt {
	return asynq.RedisClientOpt{Addr: s.addr, DB: s.c.redisDB}
}

func (s *asynqSys) name() string { return "asynq (" + s.mode + ")" }

func (s *asynqSys) settings() string {
	redisMode := "the machine's Redis 7.0 (Debian's package), which keeps nothing on disk (`--save \"\" --appendonly no`)"
	if s.private != nil {
		redisMode = "a private Redis 7.0 with `--appendonly yes --appendfsync always`: every write is fsynced before Redis answers"
	}
	return "v0.25.1 (the proxy also serves v0.26.0, from an earlier copy and not as an approved release), on " + redisMode +
		"; Concurrency 16; the default DelayedTaskCheckInterval (5 s, which moves due scheduled and retry tasks to pending); " +
		"RetryDelayFunc of 1 s; `Client.Enqueue` per task (asynq has no bulk enqueue)"
}

func (s *asynqSys) reset(ctx context.Context) error { return s.rdb.FlushDB(ctx).Err() }

func (s *asynqSys) task(p payload, opts ...asynq.Option) (*asynq.Task, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return asynq.NewTask("peer", b, append([]asynq.Option{asynq.Queue(asynqQueue)}, opts...)...), nil
}

func (s *asynqSys) put(ctx context.Context, p payload, opts ...asynq.Option) error {
	t, err := s.task(p, opts...)
	if err != nil {
		return err
	}
	_, err = s.client.EnqueueContext(ctx, t)
	return err
}

func (s *asynqSys) enqueue(ctx context.Context, n, callers int) (float64, error) {
	defer s.reset(ctx)
	return concurrently(n, callers, func(i int) error { return s.put(ctx, payload{Seq: i}) })
}

func (s *asynqSys) bulk(context.Context, int) (float64, error) { return 0, errUnsupported }

// serve starts a server at concurrency conc; stop shuts it down.
func (s *asynqSys) serve(conc int) (stop func(), err error) {
	srv := asynq.NewServer(s.opt(), asynq.Config{
		Concurrency:    conc,
		Queues:         map[string]int{asynqQueue: 1},
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Second },
		LogLevel:       asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("peer", func(ctx context.Context, t *asynq.Task) error {
		var p payload
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return err
		}
		retried, _ := asynq.GetRetryCount(ctx)
		return s.probe.run(p, retried == 0)
	})
	if err := srv.Start(mux); err != nil {
		return nil, err
	}
	return srv.Shutdown, nil
}

func (s *asynqSys) drain(ctx context.Context, n, conc int) (float64, error) {
	defer s.reset(ctx)
	if _, err := concurrently(n, 64, func(i int) error { return s.put(ctx, payload{Seq: i}) }); err != nil {
		return 0, err
	}
	s.probe.arm(modeCount, n)
	start := time.Now()
	stop, err := s.serve(conc)
	if err != nil {
		return 0, err
	}
	defer stop()
	if _, err := s.probe.wait(ctx, 10*time.Minute); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func (s *asynqSys) lateness(ctx context.Context, n int, delay time.Duration) ([]time.Duration, error) {
	defer s.reset(ctx)
	s.probe.arm(modeLate, n)
	stop, err := s.serve(16)
	if err != nil {
		return nil, err
	}
	defer stop()
	if err := spaced(n, func(i int) error {
		at := time.Now().Add(delay)
		return s.put(ctx, payload{Seq: i, At: at.UnixNano()}, asynq.ProcessAt(at))
	}); err != nil {
		return nil, err
	}
	return s.probe.wait(ctx, time.Minute+delay)
}

func (s *asynqSys) retry(ctx context.Context, n int) ([]time.Duration, error) {
	defer s.reset(ctx)
	s.probe.arm(modeRetry, n)
	stop, err := s.serve(16)
	if err != nil {
		return nil, err
	}
	defer stop()
	for i := range n {
		if err := s.put(ctx, payload{Seq: i}, asynq.MaxRetry(1)); err != nil {
			return nil, err
		}
	}
	return s.probe.wait(ctx, time.Minute)
}

func (s *asynqSys) close() {
	_ = s.reset(context.Background())
	s.client.Close()
	s.rdb.Close()
	if s.private != nil {
		_ = s.private.Process.Kill()
		_ = s.private.Wait()
		os.RemoveAll(s.dir)
	}
}
