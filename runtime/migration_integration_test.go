//go:build integration

package queuey

// How running producers and workers live through a migration of one of their
// queues (provider/internal/migrate): the queue is absent for moments, and a
// process that reconnects meanwhile must not declare it back with its old
// arguments.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

func migSet(b *testBroker) QueueSet {
	return QueueSet{Prefix: b.prefix, Queues: []QueueConfig{{Name: "jobs", MaxPriority: NoPriority}}}
}

func TestIntegrationProducerRetriesWhileItsQueueIsAbsent(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	set := migSet(b)
	p, err := NewProducer(ctx, b.url, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	ch := b.channel()
	work := set.WorkQueue("jobs")
	if _, err := ch.QueueDelete(work, false, false, false); err != nil {
		t.Fatal(err)
	}

	time.AfterFunc(300*time.Millisecond, func() { b.declare(work, true, map[string]any{}) })
	start := time.Now()
	if _, err := p.Enqueue(ctx, "jobs", "k", 1, nil); err != nil {
		t.Fatalf("Enqueue while the queue was absent for 300 ms: %v", err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("Enqueue returned after %v, before the queue was back", took)
	}
	if n := b.count(ch, work); n != 1 {
		t.Errorf("%s holds %d messages, want 1", work, n)
	}
	// A batch retries the same way.
	if _, err := ch.QueueDelete(work, false, false, false); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, func() { b.declare(work, true, map[string]any{}) })
	if _, err := p.EnqueueBatch(ctx, []BatchJob{{Queue: "jobs", JobType: "k", Payload: 1}, {Queue: "jobs", JobType: "k", Payload: 2}}); err != nil {
		t.Fatalf("EnqueueBatch while the queue was absent for 300 ms: %v", err)
	}
}

func TestIntegrationProducerUnroutableRetryIsBounded(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	set := migSet(b)
	for _, c := range []struct {
		retry    time.Duration
		min, max time.Duration
	}{{-1, 0, 150 * time.Millisecond}, {400 * time.Millisecond, 200 * time.Millisecond, 1500 * time.Millisecond}} {
		p, err := NewProducer(ctx, b.url, set, &ProducerOptions{UnroutableRetry: c.retry})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.channel().QueueDelete(set.WorkQueue("jobs"), false, false, false); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = p.Enqueue(ctx, "jobs", "k", 1, nil)
		took := time.Since(start)
		if !errors.Is(err, ErrUnroutable) {
			t.Errorf("UnroutableRetry %v: Enqueue onto a deleted queue = %v, want ErrUnroutable", c.retry, err)
		}
		if took < c.min || took > c.max {
			t.Errorf("UnroutableRetry %v: gave up after %v, want between %v and %v", c.retry, took, c.min, c.max)
		}
		_ = p.Close()
	}
}

// TestIntegrationReconnectDoesNotRedeclareAQueueBeingMigrated pins the bug
// where a process that reconnected while a migration had its queue deleted
// declared it again with its old arguments, and the migration's
// redeclaration then failed with PRECONDITION_FAILED.
func TestIntegrationReconnectDoesNotRedeclareAQueueBeingMigrated(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	set := migSet(b)
	p, err := NewProducer(ctx, b.url, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	work := set.WorkQueue("jobs")
	reconnect := func() {
		t.Helper()
		p.conn.mu.Lock()
		cur := p.conn.cur
		p.conn.mu.Unlock()
		_ = cur.Close()
		awaitReconnect(ctx, t, p.conn, cur)
	}

	// Mid-migration: the temporary queue exists, the work queue does not.
	b.declare(topology.MigrationName(work), true, map[string]any{})
	if _, err := b.channel().QueueDelete(work, false, false, false); err != nil {
		t.Fatal(err)
	}
	reconnect()
	if q := b.queue(work); q != nil {
		t.Fatalf("the reconnect declared %s while it was being migrated (arguments %v)", work, q.Arguments)
	}

	// Migrated: the work queue has the new arguments, the process the old.
	b.declare(work, true, map[string]any{topology.ArgMaxPriority: 10})
	if _, err := b.channel().QueueDelete(topology.MigrationName(work), false, false, false); err != nil {
		t.Fatal(err)
	}
	reconnect()
	if _, err := p.Enqueue(ctx, "jobs", "k", 1, nil); err != nil {
		t.Fatalf("Enqueue after reconnecting to a migrated queue: %v", err)
	}
	if q := b.queue(work); q == nil || q.Arguments[topology.ArgMaxPriority] != float64(10) {
		t.Fatalf("%s after the reconnect: %+v, want x-max-priority 10 kept", work, q)
	}
}
