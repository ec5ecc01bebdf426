//go:build integration

package queuey

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
)

// TestIntegrationTransientQueueRefusedAtStartUp runs against a broker that
// refuses transient non-exclusive queues (RabbitMQ 4.3's default): a
// producer and a worker pool of a set with a NonDurable queue fail to start
// with an error that names the queue and says what to set, instead of
// reconnecting forever; the durable queues of the same set start fine.
func TestIntegrationTransientQueueRefusedAtStartUp(t *testing.T) {
	env := brokertest.Strict(t)
	b := brokertest.Open(t, env)
	prefix := b.NewPrefix("transient")
	set := QueueSet{Prefix: prefix, Queues: []QueueConfig{{Name: "kept"}, {Name: "fleeting", NonDurable: true}}}

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	p, err := NewProducer(ctx, env.AMQPURL, set, nil)
	if err == nil {
		_ = p.Close()
		t.Fatal("NewProducer of a set with a transient queue succeeded on a broker that refuses them")
	}
	if ctx.Err() != nil {
		t.Fatalf("NewProducer waited for its context instead of failing: %v", err)
	}
	checkTransientRefused(t, err, prefix+".fleeting")
	t.Logf("NewProducer: %v", err)

	w := NewWorkers()
	AddWorker(w, WorkFunc[fleetingArgs](func(context.Context, *Job[fleetingArgs]) error { return nil }))
	pool, err := NewWorkerPool(ctx, env.AMQPURL, set, w, nil)
	if err == nil {
		err = pool.Start()
		defer func() { _ = pool.Stop(context.Background()) }()
	}
	if err == nil {
		t.Fatal("a worker pool of a set with a transient queue started on a broker that refuses them")
	}
	checkTransientRefused(t, err, prefix+".fleeting")

	durable := QueueSet{Prefix: prefix, Queues: []QueueConfig{{Name: "kept"}}}
	p, err = NewProducer(ctx, env.AMQPURL, durable, nil)
	if err != nil {
		t.Fatalf("NewProducer of the durable queue alone: %v", err)
	}
	_ = p.Close()
}

type fleetingArgs struct{}

func (fleetingArgs) Kind() string  { return "fleeting" }
func (fleetingArgs) Queue() string { return "fleeting" }

func checkTransientRefused(t *testing.T, err error, queue string) {
	t.Helper()
	if !errors.Is(err, ErrTransientRefused) {
		t.Errorf("error %q does not match ErrTransientRefused", err)
	}
	for _, want := range []string{queue, "NonDurable", "durable = true", "deprecated_features.permit.transient_nonexcl_queues = true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
