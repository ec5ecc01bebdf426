package migrate

import (
	"testing"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

func TestDescribe(t *testing.T) {
	t.Parallel()
	got := Describe("p.x", 1234, topology.WorkArgs(topology.Queue{MaxPriority: 10}), true)
	want := `queue "p.x" (1,234 messages) will be migrated: its messages moved to "p.x.migrating", the queue declared again with x-max-priority=10 (durable), and the messages moved back, with their properties`
	if got != want {
		t.Fatalf("Describe:\n got %s\nwant %s", got, want)
	}
	if got := Describe("p.y", -1, nil, false); got != `queue "p.y" (message count unknown) will be migrated: its messages moved to "p.y.migrating", the queue declared again with no arguments (transient), and the messages moved back, with their properties` {
		t.Fatalf("Describe unknown count: %s", got)
	}
}

func TestCount(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "0 messages", 1: "1 message", 12: "12 messages", 999: "999 messages", 1000: "1,000 messages", 1234567: "1,234,567 messages"} {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestFormatArgs(t *testing.T) {
	t.Parallel()
	got := FormatArgs(map[string]any{topology.ArgMessageTTL: int64(60000), topology.ArgMaxPriority: int64(10)})
	if want := "x-max-priority=10, x-message-ttl=60000"; got != want {
		t.Fatalf("FormatArgs = %q, want %q", got, want)
	}
}

func TestUnfinished(t *testing.T) {
	t.Parallel()
	got := Unfinished([]string{"p.b", "p.b.migrating", "p.a.migrating", "p.a.dead", "p.c", "p.c.deferred.1000", ".migrating"})
	if len(got) != 2 || got[0] != "p.a" || got[1] != "p.b" {
		t.Fatalf("Unfinished = %v, want [p.a p.b]", got)
	}
}
