//go:build integration

package queuey

// Helpers for tests against a real RabbitMQ, over the shared fixture
// (internal/brokertest): every test gets a testBroker with a prefix of its
// own, and every queue under that prefix is deleted when the test ends, hold
// queues included. AMQP_URL and QUEUEY_ENDPOINT (QUEUEY_USERNAME,
// QUEUEY_PASSWORD) say where the broker is; a broker that cannot be reached
// fails the test: the integration tag means the broker is required.

import (
	"net/url"
	"testing"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
)

// testBroker is a broker as one test sees it: the shared fixture's, under
// the names these tests use.
type testBroker struct {
	t      testing.TB
	shared *brokertest.Broker
	url    string
	api    *rabbithole.Client
	vhost  string
	prefix string
}

// newTestBroker checks that the broker answers on AMQP and on the management
// API, and gives the test a unique prefix whose queues it deletes in
// t.Cleanup. Register it before anything that publishes, so that cleanup
// runs last.
func newTestBroker(t testing.TB) *testBroker {
	t.Helper()
	s := brokertest.New(t, "qt")
	return &testBroker{t: t, shared: s, url: s.AMQPURL, api: s.API, vhost: s.Vhost, prefix: s.Prefix}
}

func isNotFound(err error) bool { return brokertest.IsNotFound(err) }

// name is the broker name of logical queue name under the test's prefix.
func (b *testBroker) name(logical string) string { return b.prefix + "." + logical }

// queueColumns are the fields the tests read of a queue. Without them the
// answer includes consumer_details, which rabbit-hole cannot decode while a
// consumer's channel is closing (channel_details [] instead of an object).
var queueColumns = url.Values{"columns": {"name,durable,auto_delete,exclusive,arguments,messages"}}

// queue reads a queue through the management API; nil if it does not exist.
func (b *testBroker) queue(name string) *rabbithole.DetailedQueueInfo {
	b.t.Helper()
	q, err := b.api.GetQueueWithParameters(b.vhost, name, queueColumns)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		b.t.Fatalf("management API: get queue %s: %v", name, err)
	}
	return q
}

// queueNames lists the test's queues through the management API.
func (b *testBroker) queueNames() []string {
	b.t.Helper()
	var names []string
	for _, q := range b.shared.Queues(b.prefix) {
		names = append(names, q.Name)
	}
	return names
}

// declare makes a queue by hand through the management API, as an operator
// (or an older deployment) would have.
func (b *testBroker) declare(name string, durable bool, args map[string]any) {
	b.t.Helper()
	if _, err := b.api.DeclareQueue(b.vhost, name, rabbithole.QueueSettings{Durable: durable, Arguments: args}); err != nil {
		b.t.Fatalf("management API: declare queue %s: %v", name, err)
	}
}

// channel opens a plain AMQP channel for the test to look with; connection
// and channel close at cleanup.
func (b *testBroker) channel() *amqp.Channel {
	b.t.Helper()
	ch, err := b.shared.Dial().Channel()
	if err != nil {
		b.t.Fatal(err)
	}
	return ch
}

// count is how many messages are ready in a queue, read with a passive
// declaration, which is exact where the management API lags by seconds.
// Do not use it on a hold queue: a declaration, passive or not, renews
// x-expires.
func (b *testBroker) count(ch *amqp.Channel, name string) int {
	b.t.Helper()
	q, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
	if err != nil {
		b.t.Fatalf("passive declare %s: %v", name, err)
	}
	return q.Messages
}

// get takes the next message from a queue and acks it; ok is false when the
// queue is empty.
func (b *testBroker) get(ch *amqp.Channel, name string) (amqp.Delivery, bool) {
	b.t.Helper()
	d, ok, err := ch.Get(name, true)
	if err != nil {
		b.t.Fatalf("basic.get %s: %v", name, err)
	}
	return d, ok
}

// eventually polls cond every interval until it holds or timeout passes.
func eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(interval)
	}
}
