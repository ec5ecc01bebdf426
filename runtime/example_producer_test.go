package queuey_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// A producer declares its queue set at start-up (myapp.emails and
// myapp.emails.dead here), then enqueues jobs now, after a delay, or deferred
// ahead of the backlog. Every call returns once the broker has confirmed the
// job. It needs a broker, so it has no Output to check.
func Example_producer() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	set := queuey.QueueSet{
		Prefix: "myapp",
		Queues: []queuey.QueueConfig{
			{Name: "emails"}, // priority queue with 10 levels, durable
			{Name: "reports", MessageTTL: 24 * time.Hour},
		},
	}
	p, err := queuey.NewProducer(ctx, "amqp://guest:guest@127.0.0.1:5672/", set, nil)
	var pe *queuey.PreconditionError
	if errors.As(err, &pe) {
		// The broker has myapp.emails with other arguments: migrate it
		// (terraform apply) or change the configuration to match.
		log.Fatalf("queue %s: %s differs: %v", pe.Queue, pe.Argument, err)
	}
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	type welcome struct {
		To string `json:"to"`
	}
	id, err := p.Enqueue(ctx, "emails", "welcome_email", welcome{To: "ada@example.com"},
		&queuey.EnqueueOptions{CorrelationID: "signup-42"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("enqueued", id)

	// Waits in myapp.emails.deferred.30000, then returns at priority 0.
	if _, err := p.EnqueueAfter(ctx, "emails", "reminder_email", welcome{To: "ada@example.com"}, 30*time.Second, nil); err != nil {
		log.Fatal(err)
	}
	// Comes back at priority 10, ahead of everything enqueued meanwhile.
	if _, err := p.Defer(ctx, "emails", "welcome_email", welcome{To: "bob@example.com"}, 5*time.Second, nil); err != nil {
		log.Fatal(err)
	}
	// A delay no hold queue can carry is refused, never shortened.
	_, err = p.EnqueueAfter(ctx, "reports", "monthly", nil, 30*24*time.Hour, nil)
	fmt.Println(errors.Is(err, queuey.ErrDelayTooLong), err)

	ids, err := p.EnqueueBatch(ctx, []queuey.BatchJob{
		{Queue: "reports", JobType: "daily", Payload: map[string]string{"day": "2026-12-01"}},
		{Queue: "reports", JobType: "daily", Payload: map[string]string{"day": "2026-12-02"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(ids), "reports enqueued")
}

// A process that publishes onto queues another process or Terraform owns
// declares nothing. It can enqueue, and a missing queue is still an error,
// but it cannot delay or defer.
func ExampleNewUndeclaredProducer() {
	ctx := context.Background()
	p, err := queuey.NewUndeclaredProducer(ctx, "amqp://guest:guest@127.0.0.1:5672/", "myapp", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Enqueue(ctx, "emails", "welcome_email", map[string]string{"to": "ada@example.com"}, nil); errors.Is(err, queuey.ErrUnroutable) {
		log.Fatal("myapp.emails does not exist: apply the Terraform configuration first")
	}
	_, err = p.Defer(ctx, "emails", "welcome_email", nil, time.Minute, nil)
	fmt.Println(errors.Is(err, queuey.ErrUnknownQueue))
}
