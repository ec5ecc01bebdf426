package queueytest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/queueytest"
)

// ChargeArgs asks for a customer to be charged.
type ChargeArgs struct {
	Customer string `json:"customer"`
	Cents    int    `json:"cents"`
}

func (ChargeArgs) Kind() string  { return "billing.charge" }
func (ChargeArgs) Queue() string { return "billing" }

// ReceiptArgs asks for a receipt to be mailed.
type ReceiptArgs struct {
	Customer string `json:"customer"`
}

func (ReceiptArgs) Kind() string  { return "billing.receipt" }
func (ReceiptArgs) Queue() string { return "billing" }

// errRateLimited and errDeclined are what the payment gateway of this
// example answers.
var (
	errRateLimited = errors.New("429 too many requests")
	errDeclined    = errors.New("card declined")
)

// ChargeWorker charges through a gateway and enqueues a receipt.
type ChargeWorker struct {
	Charge   func(customer string, cents int) error
	Producer queuey.Enqueuer
}

func (w *ChargeWorker) Work(ctx context.Context, job *queuey.Job[ChargeArgs]) error {
	err := w.Charge(job.Args.Customer, job.Args.Cents)
	switch {
	case errors.Is(err, errRateLimited):
		return queuey.JobDefer(30*time.Second, "gateway said Retry-After: 30")
	case errors.Is(err, errDeclined):
		return queuey.JobFatal(err) // retrying will not help
	case err != nil:
		return err // retried by the policy
	}
	_, err = queuey.EnqueueJob(ctx, w.Producer, ReceiptArgs{Customer: job.Args.Customer}, &queuey.EnqueueOptions{CorrelationID: job.ID})
	return err
}

// Example unit-tests a handler without a broker: each outcome the worker
// pool would carry out, and the job the handler enqueued.
func Example() {
	ctx := context.Background()
	gateway := map[string]error{
		"cus_ok":      nil,
		"cus_busy":    errRateLimited,
		"cus_broke":   errDeclined,
		"cus_network": errors.New("connection reset"),
	}
	producer := queueytest.NewProducer()
	handler := &ChargeWorker{
		Charge:   func(customer string, _ int) error { return gateway[customer] },
		Producer: producer,
	}
	worker, err := queueytest.NewWorker[ChargeArgs](handler, &queuey.WorkerOptions{
		Retry: &queuey.RetryPolicy{MaxAttempts: 3},
	})
	if err != nil {
		panic(err)
	}

	for _, customer := range []string{"cus_ok", "cus_busy", "cus_broke"} {
		res := worker.Work(ctx, ChargeArgs{Customer: customer, Cents: 500}, nil)
		fmt.Printf("%s: %s\n", customer, res)
	}
	res := worker.Work(ctx, ChargeArgs{Customer: "cus_network"}, nil)
	fmt.Printf("cus_network, attempt 1: %s, retried: %v\n", res.Action, res.Retried())
	res = worker.Work(ctx, ChargeArgs{Customer: "cus_network"}, &queueytest.JobOptions{Attempt: 3})
	fmt.Printf("cus_network, attempt 3: %s\n", res)

	// In a test, queueytest.RequireEnqueued[ReceiptArgs](t, producer)
	// decodes the one receipt job.
	for _, job := range producer.Jobs() {
		fmt.Printf("enqueued %s on %s: %s\n", job.JobType, job.Queue, job.Payload)
	}
	// Output:
	// cus_ok: acked
	// cus_busy: deferred by 30s (gateway said Retry-After: 30)
	// cus_broke: dead-lettered (fatal error: card declined)
	// cus_network, attempt 1: retry, retried: true
	// cus_network, attempt 3: dead-lettered (max attempts (3) exhausted after attempt 3: connection reset)
	// enqueued billing.receipt on billing: {"customer":"cus_ok"}
}
