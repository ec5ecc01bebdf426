package queuey_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os/signal"
	"syscall"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// WelcomeEmail is a job's arguments: a stable kind and the logical queue it
// goes to.
type WelcomeEmail struct {
	UserID int `json:"user_id"`
}

func (WelcomeEmail) Kind() string  { return "emails.welcome" }
func (WelcomeEmail) Queue() string { return "emails" }

// errRetryAfter stands for a rate limit of the mail provider in this example.
var errRetryAfter = errors.New("429 Retry-After: 30")

// A worker pool runs typed handlers over the work queues of a queue set. An
// ordinary error is retried through a hold queue, JobDefer comes back ahead
// of the backlog, JobFatal goes straight to the dead-letter queue. Run stops
// pulling when its context ends, and returns once every job it pulled is
// settled. It needs a broker, so it has no Output to check.
func Example_workerPool() {
	set := queuey.QueueSet{Prefix: "myapp", Queues: []queuey.QueueConfig{{Name: "emails", Prefetch: 32}}}

	workers := queuey.NewWorkers()
	queuey.AddWorker(workers, queuey.WorkFunc[WelcomeEmail](func(ctx context.Context, job *queuey.Job[WelcomeEmail]) error {
		err := sendWelcome(ctx, job.Args.UserID)
		switch {
		case errors.Is(err, errRetryAfter):
			return queuey.JobDefer(30*time.Second, "mail provider rate limit")
		case err != nil && job.IsLastAttempt():
			log.Printf("giving up on user %d after %d attempts", job.Args.UserID, job.Attempt)
		}
		return err
	}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := queuey.NewWorkerPool(ctx, "amqp://guest:guest@127.0.0.1:5672/", set, workers, &queuey.WorkerOptions{
		JobTimeout: time.Minute,
		Retry:      &queuey.RetryPolicy{MaxAttempts: 5}, // exponential from 1 s, full jitter
		OnDeadLetter: func(_ context.Context, dl queuey.DeadLetter) {
			log.Printf("dead letter in %s: %s", dl.Queue, dl.Reason)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := pool.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

func sendWelcome(context.Context, int) error { return nil }

// An exponential policy's bound doubles from Base up to Max; each retry waits
// a random share of it (full jitter), rounded up to the retry granularity.
func ExampleRetryPolicy_Backoff() {
	p := queuey.RetryPolicy{MaxAttempts: 8, Base: time.Second, Max: 10 * time.Second}
	for attempt := 1; attempt <= 5; attempt++ {
		fmt.Printf("after attempt %d: up to %s, retry: %v\n", attempt, p.Backoff(attempt), p.Retries(attempt))
	}
	fmt.Println("after attempt 8: retry:", p.Retries(8))
	// Output:
	// after attempt 1: up to 1s, retry: true
	// after attempt 2: up to 2s, retry: true
	// after attempt 3: up to 4s, retry: true
	// after attempt 4: up to 8s, retry: true
	// after attempt 5: up to 10s, retry: true
	// after attempt 8: retry: false
}
