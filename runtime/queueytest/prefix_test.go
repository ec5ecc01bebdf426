package queueytest_test

import (
	"context"
	"testing"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/queueytest"
)

// TestWorkerPrefixShowsTheBrokerQueueName pins issue 15: a pool gives the
// handler the broker name of the queue (prefix.name) in job.Queue, while
// queueytest gave the logical name, so a handler that logged or branched on
// job.Queue passed its unit test and did otherwise in production. With
// JobOptions.Prefix the handler sees what a pool shows; without it, the
// logical name as before.
func TestWorkerPrefixShowsTheBrokerQueueName(t *testing.T) {
	t.Parallel()
	var seen string
	w := queueytest.MustNewWorker(t, queuey.WorkFunc[sendArgs](func(_ context.Context, j *queuey.Job[sendArgs]) error {
		seen = j.Queue
		return nil
	}), nil)
	queueytest.RequireAcked(t, w.Work(context.Background(), sendArgs{}, &queueytest.JobOptions{Prefix: "shop"}))
	if seen != "shop.mail" {
		t.Errorf("with Prefix shop, job.Queue = %q, want the broker name shop.mail", seen)
	}
	queueytest.RequireAcked(t, w.Work(context.Background(), sendArgs{}, nil))
	if seen != "mail" {
		t.Errorf("without a prefix, job.Queue = %q, want the logical name mail", seen)
	}
	queueytest.RequireAcked(t, w.Work(context.Background(), sendArgs{}, &queueytest.JobOptions{Prefix: "shop", Queue: "elsewhere.mail"}))
	if seen != "elsewhere.mail" {
		t.Errorf("Queue set beside Prefix: job.Queue = %q, want Queue to win", seen)
	}
}
