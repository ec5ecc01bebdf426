package migrate

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

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

// TestPublishingKeepsEveryProperty pins that a moved message is published
// with every property of the delivery it was taken as.
func TestPublishingKeepsEveryProperty(t *testing.T) {
	t.Parallel()
	ts := time.Unix(1700000000, 0)
	d := amqp.Delivery{
		Headers: amqp.Table{"x-attempt": int64(2)}, ContentType: "application/json", ContentEncoding: "gzip",
		DeliveryMode: amqp.Persistent, Priority: 7, CorrelationId: "c", ReplyTo: "r", Expiration: "60000",
		MessageId: "m", Timestamp: ts, Type: "t", UserId: "guest", AppId: "a", Body: []byte("{}"),
		Redelivered: true, DeliveryTag: 9,
	}
	p := publishing(d)
	if p.Headers["x-attempt"] != int64(2) || p.ContentType != d.ContentType || p.ContentEncoding != d.ContentEncoding ||
		p.DeliveryMode != d.DeliveryMode || p.Priority != d.Priority || p.CorrelationId != d.CorrelationId ||
		p.ReplyTo != d.ReplyTo || p.Expiration != d.Expiration || p.MessageId != d.MessageId || !p.Timestamp.Equal(ts) ||
		p.Type != d.Type || p.UserId != d.UserId || p.AppId != d.AppId || string(p.Body) != "{}" {
		t.Fatalf("publishing lost a property: %+v", p)
	}
}

func TestUnfinished(t *testing.T) {
	t.Parallel()
	got := Unfinished([]string{"p.b", "p.b.migrating", "p.a.migrating", "p.a.dead", "p.c", "p.c.deferred.1000", ".migrating"})
	if len(got) != 2 || got[0] != "p.a" || got[1] != "p.b" {
		t.Fatalf("Unfinished = %v, want [p.a p.b]", got)
	}
}
