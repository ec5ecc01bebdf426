package topology_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

func TestQuorumArguments(t *testing.T) {
	q := topology.Queue{Name: "x", MessageTTL: time.Minute, Durable: true, Type: topology.QuorumQueueType}
	work, dead := topology.QueueDeclarations("p", q)
	wantWork := map[string]any{"x-queue-type": "quorum", "x-delivery-limit": int64(20), "x-message-ttl": int64(60000)}
	if !reflect.DeepEqual(work.Args, wantWork) || !work.Durable {
		t.Errorf("work %+v, want args %v, durable", work, wantWork)
	}
	wantDead := map[string]any{"x-queue-type": "quorum", "x-delivery-limit": int64(2147483647)}
	if !reflect.DeepEqual(dead.Args, wantDead) || !reflect.DeepEqual(topology.MigrationArgs("quorum"), wantDead) {
		t.Errorf("dead %v, migration %v, want %v", dead.Args, topology.MigrationArgs("quorum"), wantDead)
	}
	// Classic queues keep the arguments they always had.
	classic := topology.Queue{Name: "x", MaxPriority: 10, Durable: true}
	if got := topology.WorkArgs(classic); !reflect.DeepEqual(got, map[string]any{"x-max-priority": int64(10)}) {
		t.Errorf("classic work args %v", got)
	}
	for _, typ := range []string{"", "classic"} {
		if len(topology.DeadArgs(typ)) != 0 || len(topology.MigrationArgs(typ)) != 0 {
			t.Errorf("%q: dead %v, migration %v, want none", typ, topology.DeadArgs(typ), topology.MigrationArgs(typ))
		}
	}
	// Hold queues stay classic: their arguments do not depend on the type.
	if _, ok := topology.HoldArgs("p.x", 1000)[topology.ArgQueueType]; ok {
		t.Error("a hold queue has a queue type")
	}
}

func TestQuorumDeferPriorityAndLastDeliveries(t *testing.T) {
	if p := topology.DeferPriority(topology.Queue{MaxPriority: 7}); p != 7 {
		t.Errorf("classic defer priority %d, want its max priority 7", p)
	}
	if p := topology.DeferPriority(topology.Queue{Type: topology.QuorumQueueType}); p != 5 {
		t.Errorf("quorum defer priority %d, want 5 (RabbitMQ 4's lowest high priority)", p)
	}
	for count, want := range map[int64]bool{0: false, 18: false, 19: true, 20: true, 50: true} {
		if got := topology.LastDeliveries(count); got != want {
			t.Errorf("LastDeliveries(%d) = %t, want %t", count, got, want)
		}
	}
}

func TestValidateQuorumQueue(t *testing.T) {
	ok := topology.Queue{Name: "x", Durable: true, Type: topology.QuorumQueueType}
	if err := topology.ValidateQueue(ok); err != nil {
		t.Errorf("a durable quorum queue without priorities: %v", err)
	}
	cases := []struct {
		q        topology.Queue
		argument string
		says     string
	}{
		{topology.Queue{Name: "x", Durable: true, Type: "quorum", MaxPriority: 10}, topology.ArgumentMaxPriority, "refused on a quorum queue"},
		{topology.Queue{Name: "x", Type: "quorum"}, topology.ArgumentQueueType, "durable"},
		{topology.Queue{Name: "x", Durable: true, Type: "stream"}, topology.ArgumentQueueType, `"stream" is not a queue type`},
	}
	for _, c := range cases {
		err := topology.ValidateQueue(c.q)
		var ae *topology.ArgumentError
		if !errors.As(err, &ae) || ae.Argument != c.argument || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want an ArgumentError about the %s saying %q", c.q, err, c.argument, c.says)
		}
	}
}

func TestRuntimeConfigQueueType(t *testing.T) {
	set := topology.Set{Prefix: "p", Queues: []topology.Queue{
		{Name: "a", MaxPriority: 10, Durable: true},
		{Name: "b", Durable: true, Type: topology.QuorumQueueType},
	}}
	c := topology.NewRuntimeConfig("/", set)
	if c.Queues[0].QueueType != "" || c.Queues[1].QueueType != "quorum" {
		t.Fatalf("queue types %q, %q; want classic left out", c.Queues[0].QueueType, c.Queues[1].QueueType)
	}
	if got := c.Set(); !reflect.DeepEqual(got, set) {
		t.Errorf("round trip: %+v, want %+v", got, set)
	}
}
