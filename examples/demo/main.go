// Command demo is queuey's end-to-end example. Against the queue set that
// ./terraform applies (prefix aq-example), it enqueues four welcome emails to
// a pretend mail API and runs a worker over them:
//
//   - ada's is sent at once;
//   - bob's meets "429 Too Many Requests, Retry-After: 1", so the handler
//     defers it: it waits in a hold queue and comes back ahead of the backlog;
//   - carol's meets "503 Service Unavailable" twice and is retried with
//     exponential backoff through hold queues, then sent;
//   - dave's mailbox does not exist: every attempt fails, and after the last
//     one the job lands in the dead-letter queue.
//
// It serves its job metrics at /metrics (queueyotel through OpenTelemetry's
// Prometheus exporter) and ends with a scrape of them.
//
// Meanwhile it prints the broker's view of the set whenever it changes: the
// work queue, the dead queue, and hold queues appearing, holding and deleting
// themselves. Run it with `make demo`, which starts the broker and applies
// the Terraform module first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// config is what the demo connects to. The defaults are the local broker's.
type config struct {
	amqpURL    string
	endpoint   string
	username   string
	password   string
	prefix     string
	holdExpiry time.Duration // how long to wait for hold queues to delete themselves
	metrics    string        // where to serve /metrics
}

func main() {
	var cfg config
	flag.StringVar(&cfg.amqpURL, "amqp-url", envOr("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "AMQP URL of the broker")
	flag.StringVar(&cfg.endpoint, "endpoint", envOr("QUEUEY_ENDPOINT", "http://127.0.0.1:15672"), "RabbitMQ management API")
	flag.StringVar(&cfg.username, "username", envOr("QUEUEY_USERNAME", "guest"), "management API user")
	flag.StringVar(&cfg.password, "password", envOr("QUEUEY_PASSWORD", "guest"), "management API password")
	flag.StringVar(&cfg.prefix, "prefix", "aq-example", "prefix of the queue set (as in ./terraform)")
	flag.StringVar(&cfg.metrics, "metrics-addr", "127.0.0.1:0", "where to serve Prometheus metrics at /metrics (port 0: any free one)")
	flag.Parse()
	cfg.holdExpiry = 15 * time.Second

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, os.Stdout, cfg); err != nil {
		log.Fatalf("demo: %v", err)
	}
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// WelcomeEmail is the demo's one kind of job.
type WelcomeEmail struct {
	To string `json:"to"`
}

// Kind is the job's stable name, independent of the Go type's.
func (WelcomeEmail) Kind() string { return "welcome_email" }

// Queue is the logical queue welcome emails go to.
func (WelcomeEmail) Queue() string { return "emails" }

// The pretend mail API's answers.
var (
	errTooManyRequests = errors.New("429 Too Many Requests, Retry-After: 1")
	errUnavailable     = errors.New("503 Service Unavailable")
	errNoMailbox       = errors.New("550 mailbox does not exist")
)

// mailAPI answers each recipient from a script, one answer per call; the last
// answer repeats.
type mailAPI struct {
	mu     sync.Mutex
	script map[string][]error
	calls  map[string]int
}

func (m *mailAPI) send(to string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	answers := m.script[to]
	n := m.calls[to]
	m.calls[to]++
	if len(answers) == 0 {
		return nil
	}
	return answers[min(n, len(answers)-1)]
}

// report is what happened to each recipient's job.
type report struct {
	Outcome        map[string]string // recipient → "sent", "dead-lettered"
	Attempts       map[string]int    // recipient → the attempt that ended it
	Deferrals      map[string]int    // recipient → deferrals before it ended
	HoldQueuesSeen []string          // hold queues the broker showed
	HoldQueuesGone []string          // of those, the ones that deleted themselves
	DeadLetter     amqp.Table        // headers of this run's dead letter
	Settled        []string          // the queuey_jobs_settled lines of a /metrics scrape
}

func run(ctx context.Context, out io.Writer, cfg config) (*report, error) {
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	set := queuey.QueueSet{Prefix: cfg.prefix, Queues: []queuey.QueueConfig{
		{Name: "emails", MaxPriority: 10},
		{Name: "reports", MaxPriority: 10, MessageTTL: 24 * time.Hour},
	}}
	emails, dead, reports := set.WorkQueue("emails"), set.DeadQueue("emails"), set.WorkQueue("reports")

	mgmt, err := rabbithole.NewClient(strings.TrimRight(cfg.endpoint, "/"), cfg.username, cfg.password)
	if err != nil {
		return nil, fmt.Errorf("management API client: %w", err)
	}

	// The producer declares the set as Terraform did, with the same
	// arguments: a disagreement would fail here with PRECONDITION_FAILED.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil)) // the demo says what happens in plain words
	if cfg.metrics == "" {
		cfg.metrics = "127.0.0.1:0"
	}
	mx, err := serveMetrics(cfg.metrics)
	if err != nil {
		return nil, err
	}
	defer mx.close()
	say("serving job metrics at %s", mx.url)
	producerOpts := &queuey.ProducerOptions{Logger: quiet}
	mx.inst.InstrumentProducer(producerOpts)
	producer, err := queuey.NewProducer(ctx, cfg.amqpURL, set, producerOpts)
	if err != nil {
		return nil, fmt.Errorf("start the producer (is RabbitMQ running? `make broker` starts it): %w", err)
	}
	defer producer.Close()

	// A dead letter of an earlier run would be counted as this run's, and
	// report jobs would pile up run after run.
	for _, q := range []string{dead, reports} {
		if n, err := purge(cfg.amqpURL, q); err != nil {
			return nil, err
		} else if n > 0 {
			say("cleared %d message(s) an earlier run left in %s", n, q)
		}
	}

	w := &watcher{mgmt: mgmt, amqpURL: cfg.amqpURL, prefix: cfg.prefix + ".", say: say}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); w.run(watchCtx) }()
	stopWatching := func() { stopWatch(); <-watchDone }
	defer stopWatching()

	api := &mailAPI{calls: map[string]int{}, script: map[string][]error{
		"bob@example.com":   {errTooManyRequests, nil},
		"carol@example.com": {errUnavailable, errUnavailable, nil},
		"dave@example.com":  {errNoMailbox},
	}}
	rep := &report{Outcome: map[string]string{}, Attempts: map[string]int{}, Deferrals: map[string]int{}}
	var mu sync.Mutex
	var done sync.WaitGroup
	finish := func(to, outcome string, job queuey.JobContext) {
		mu.Lock()
		defer mu.Unlock()
		if _, seen := rep.Outcome[to]; !seen {
			rep.Outcome[to], rep.Attempts[to], rep.Deferrals[to] = outcome, job.Attempt, job.Deferrals
			done.Done()
		}
	}

	workers := queuey.NewWorkers()
	queuey.AddWorker(workers, queuey.WorkFunc[WelcomeEmail](func(ctx context.Context, job *queuey.Job[WelcomeEmail]) error {
		to := job.Args.To
		err := api.send(to)
		switch {
		case err == nil:
			say("%-18s sent (attempt %d of %d, deferred %d time(s), priority %d)", to, job.Attempt, job.MaxAttempts, job.Deferrals, job.Priority)
			finish(to, "sent", job.JobContext)
			return nil
		case errors.Is(err, errTooManyRequests):
			say("%-18s mail API: %v -> deferred by 1s; it will come back at priority 10, ahead of the backlog", to, err)
			return queuey.JobDefer(time.Second, err.Error())
		case job.IsLastAttempt():
			say("%-18s mail API: %v -> attempt %d of %d failed, no attempts left: dead-lettered", to, err, job.Attempt, job.MaxAttempts)
			return err
		default:
			say("%-18s mail API: %v -> attempt %d of %d failed: retried with backoff through a hold queue", to, err, job.Attempt, job.MaxAttempts)
			return err
		}
	}))

	workerOpts := &queuey.WorkerOptions{
		Producer:         producer,
		Queues:           []string{"emails"},
		Logger:           quiet,
		Retry:            &queuey.RetryPolicy{MaxAttempts: 3, Base: 500 * time.Millisecond, Max: 2 * time.Second},
		RetryGranularity: 500 * time.Millisecond,
		OnDeadLetter: func(_ context.Context, dl queuey.DeadLetter) {
			var email WelcomeEmail
			_ = jsonPayload(dl.Body, &email)
			finish(email.To, "dead-lettered", dl.Job)
		},
	}
	mx.inst.InstrumentWorker(workerOpts)
	pool, err := queuey.NewWorkerPool(ctx, cfg.amqpURL, set, workers, workerOpts)
	if err != nil {
		return nil, fmt.Errorf("start the worker: %w", err)
	}
	if err := pool.Start(); err != nil {
		return nil, fmt.Errorf("start the worker: %w", err)
	}
	defer pool.Stop(context.Background())

	say("enqueueing four welcome emails onto %s", emails)
	recipients := []string{"ada@example.com", "bob@example.com", "carol@example.com", "dave@example.com"}
	done.Add(len(recipients))
	for _, to := range recipients {
		if _, err := queuey.EnqueueJob(ctx, producer, WelcomeEmail{To: to}, &queuey.EnqueueOptions{CorrelationID: "demo"}); err != nil {
			return nil, fmt.Errorf("enqueue %s: %w", to, err)
		}
	}

	allDone := make(chan struct{})
	go func() { done.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-time.After(60 * time.Second):
		return nil, errors.New("the four jobs did not settle within 60 s; is a worker of an earlier run still consuming?")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := pool.Stop(ctx); err != nil {
		return nil, fmt.Errorf("stop the worker: %w", err)
	}

	say("all four jobs settled; waiting for the idle hold queues to delete themselves (x-expires = 2 x their TTL)")
	deadline := time.Now().Add(cfg.holdExpiry)
	for time.Now().Before(deadline) && len(w.holdQueues()) > 0 {
		time.Sleep(250 * time.Millisecond)
	}
	stopWatching()
	rep.HoldQueuesSeen, rep.HoldQueuesGone = w.seen(), w.gone()

	// Nothing consumes reports here: these wait in the queue, for make demo
	// to migrate them when it changes the queue's max_priority.
	for i, day := range []string{"2026-11-30", "2026-12-01", "2026-12-02"} {
		if _, err := producer.Enqueue(ctx, "reports", "daily_report", map[string]string{"day": day}, nil); err != nil {
			return nil, fmt.Errorf("enqueue report %d: %w", i+1, err)
		}
	}
	say("left 3 report jobs waiting in %s (nothing consumes it in this example)", reports)

	headers, err := peekDeadLetter(cfg.amqpURL, dead)
	if err != nil {
		return nil, err
	}
	rep.DeadLetter = headers
	if rep.Settled, err = mx.scrape(ctx); err != nil {
		return nil, err
	}

	fmt.Fprintln(out)
	fmt.Fprintln(out, "What happened:")
	for _, to := range recipients {
		fmt.Fprintf(out, "  %-18s %-14s after %d attempt(s), %d deferral(s)\n", to, rep.Outcome[to], rep.Attempts[to], rep.Deferrals[to])
	}
	fmt.Fprintf(out, "  hold queues that appeared: %s\n", strings.Join(rep.HoldQueuesSeen, ", "))
	fmt.Fprintf(out, "  of those, deleted themselves when idle: %s\n", strings.Join(rep.HoldQueuesGone, ", "))
	fmt.Fprintf(out, "  the dead letter in %s carries x-death-reason=%q, x-original-queue=%q, x-attempts=%v\n",
		dead, headers[topology.HeaderDeathReason], headers[topology.HeaderOriginalQueue], headers[topology.HeaderAttempts])
	fmt.Fprintf(out, "  a scrape of %s counts the deliveries settled, by outcome:\n", mx.url)
	for _, line := range rep.Settled {
		fmt.Fprintf(out, "    %s\n", line)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Look at it yourself: open %s (guest/guest), Queues tab, filter %q.\n", strings.TrimRight(cfg.endpoint, "/"), cfg.prefix)
	fmt.Fprintf(out, "dave's dead letter stays in %s until the next run clears it. A hold queue that is not\n", dead)
	fmt.Fprintln(out, "draining means nothing consumes the work queue it dead-letters into.")
	return rep, nil
}
