//go:build integration

package migrate

import (
	"errors"
	"testing"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

var (
	quorumWork = topology.WorkArgs(topology.Queue{Durable: true, Type: topology.QuorumQueueType})
	classic10  = topology.WorkArgs(topology.Queue{MaxPriority: 10})
)

// A migration from and to quorum queues keeps every message, and messages
// that reach the quorum queue between the check that it is empty and its
// deletion (which RabbitMQ cannot make if-empty for a quorum queue) are
// moved on, not deleted with it.
func TestIntegrationMigrateQuorumKeepsLateMessages(t *testing.T) {
	t.Parallel()
	b := newMigBroker(t)
	q := b.prefix + ".jobs"
	b.declare(q, true, quorumWork)
	const n, late = 200, 7
	b.publish(q, 0, n)
	hooked := 0
	opts := &Options{QueueType: topology.QuorumQueueType, Grace: 1, beforeQuorumDelete: func(name string) error {
		if name == q && hooked == 0 {
			hooked++
			b.publish(name, n, n+late)
		}
		return nil
	}}
	res, err := Migrate(t.Context(), b.dial(), q, classic10, true, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rescued != late {
		t.Errorf("rescued %d messages, want the %d published during the delete", res.Rescued, late)
	}
	if got := b.args(q); got[topology.ArgMaxPriority] != float64(10) || got[topology.ArgQueueType] == "quorum" {
		t.Errorf("%s has arguments %v, want a classic priority queue", q, got)
	}
	got, dups, _ := b.drain(q)
	checkIntact(t, got, n+late)
	t.Logf("%+v, %d duplicates", res, dups)

	// And back to quorum: the temporary queue is a quorum queue too.
	b.publish(q, 0, n)
	res, err = Migrate(t.Context(), b.dial(), q, quorumWork, true, &Options{Grace: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.args(q); got[topology.ArgQueueType] != "quorum" {
		t.Errorf("%s has arguments %v, want a quorum queue", q, got)
	}
	got, _, _ = b.drain(q)
	for _, d := range got {
		// RabbitMQ 3.10's quorum queues add it to every delivery.
		delete(d.Headers, topology.HeaderDeliveryCount)
	}
	checkIntact(t, got, n)
	if ok, _ := b.exists(topology.MigrationName(q)); ok {
		t.Errorf("%s is still there", topology.MigrationName(q))
	}
}

// DeleteIfEmpty deletes an empty quorum queue, refuses one with messages,
// and puts back, in the queue declared again, what reaches it during the
// delete.
func TestIntegrationDeleteIfEmptyQuorum(t *testing.T) {
	t.Parallel()
	b := newMigBroker(t)
	q := b.prefix + ".dead"
	args := topology.DeadArgs(topology.QuorumQueueType)
	b.declare(q, true, args)
	b.publish(q, 0, 3)
	if err := DeleteIfEmpty(t.Context(), b.dial(), q, true, args); !errors.Is(err, ErrQueueNotEmpty) {
		t.Fatalf("DeleteIfEmpty of a queue with 3 messages: %v, want ErrQueueNotEmpty", err)
	}
	if ok, ready := b.exists(q); !ok || ready != 3 {
		t.Fatalf("after a refused delete: exists %t with %d ready, want 3", ok, ready)
	}
	b.drain(q)
	// A message that arrives between the check and the delete.
	ac := b.dial()
	opts := (&Options{beforeQuorumDelete: func(name string) error {
		b.publish(name, 10, 11)
		return nil
	}}).resolved()
	m := &migration{ctx: t.Context(), ac: ac, queue: q, opts: opts}
	defer m.close()
	n, err := m.deleteQuorumThen(q, q, func() error { return m.declare(q, true, args) })
	if err != nil || n != 1 {
		t.Fatalf("delete with a late message: rescued %d, %v; want 1", n, err)
	}
	if ok, ready := b.exists(q); !ok || ready != 1 {
		t.Fatalf("after the delete: exists %t with %d ready, want the late message back", ok, ready)
	}
	b.drain(q)
	if err := DeleteIfEmpty(t.Context(), ac, q, true, args); err != nil {
		t.Fatalf("DeleteIfEmpty of an empty quorum queue: %v", err)
	}
	if ok, _ := b.exists(q); ok {
		t.Errorf("%s still exists", q)
	}
	// A classic queue gets the broker's if-empty delete.
	c := b.prefix + ".classic"
	b.declare(c, true, nil)
	b.publish(c, 0, 1)
	if err := DeleteIfEmpty(t.Context(), ac, c, true, nil); !errors.Is(err, ErrQueueNotEmpty) {
		t.Errorf("DeleteIfEmpty of a classic queue with a message: %v", err)
	}
}
