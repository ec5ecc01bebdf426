//go:build integration

package queuey_test

import (
	"context"
	"testing"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// TestIntegrationMessageTTLDiscardsAJobWithoutADeadLetter pins what the
// docs of QueueConfig.MessageTTL (and of the provider's message_ttl) say: a
// job that waits in its work queue longer than the TTL is dropped by
// RabbitMQ without a trace. The producer's enqueue succeeded; the work
// queue has no dead-letter exchange (the seed topology), so the job does
// not reach the dead-letter queue, and no handler or log ever sees it.
func TestIntegrationMessageTTLDiscardsAJobWithoutADeadLetter(t *testing.T) {
	t.Parallel()
	e := wkSetup(t, "ttl")
	set := e.set(queuey.QueueConfig{Name: "jobs", MessageTTL: 2 * time.Second})
	work, dead := topology.WorkName(e.prefix, "jobs"), topology.DeadName(topology.WorkName(e.prefix, "jobs"))
	p := e.producer(set)
	if _, err := queuey.EnqueueJob(context.Background(), p, wkOK{}, nil); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if n := e.ready(work); n != 1 {
		t.Fatalf("%s holds %d messages right after the enqueue, want the job", work, n)
	}
	// Nothing consumes the queue: the broker expires the job.
	wkEventually(t, 30*time.Second, func() bool { return e.ready(work) == 0 }, "the job to expire from %s", work)
	if n := e.ready(dead); n != 0 {
		t.Errorf("%s holds %d messages after the job expired, want 0: the docs say an expired job is not dead-lettered", dead, n)
	}
	// The wait counts from the job's arrival in the work queue: a job
	// delayed for longer than the TTL arrives from its hold queue intact,
	// and expires a TTL after that.
	if _, err := p.EnqueueAfter(context.Background(), "jobs", wkOK{}.Kind(), wkOK{}, 3*time.Second, nil); err != nil {
		t.Fatalf("enqueue after 3s: %v", err)
	}
	wkEventually(t, 30*time.Second, func() bool { return e.ready(work) == 1 }, "the delayed job to reach %s", work)
	wkEventually(t, 30*time.Second, func() bool { return e.ready(work) == 0 }, "the delayed job to expire from %s", work)
	if n := e.ready(dead); n != 0 {
		t.Errorf("%s holds %d messages after the delayed job expired, want 0", dead, n)
	}
	q, err := e.mgmt.GetQueue("/", work)
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{topology.ArgDeadLetterExchange, topology.ArgDeadLetterRoutingKey} {
		if v, ok := q.Arguments[arg]; ok {
			t.Errorf("work queue %s has %s = %v; the docs say it has no dead-letter exchange", work, arg, v)
		}
	}
}
