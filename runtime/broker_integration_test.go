//go:build integration

package queuey

// Helpers for tests against a real RabbitMQ. Every test gets a testBroker
// with a prefix of its own, and every queue under that prefix is deleted
// when the test ends, hold queues included.
//
// AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/) and QUEUEY_ENDPOINT
// (default http://127.0.0.1:15672, user guest/guest, or QUEUEY_USERNAME and
// QUEUEY_PASSWORD) say where the broker is. A broker that cannot be reached
// fails the test: the integration tag means the broker is required.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"
)

// testBroker is a broker as one test sees it.
type testBroker struct {
	t      testing.TB
	url    string
	api    *rabbithole.Client
	vhost  string
	prefix string
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

var unsafeInPrefix = regexp.MustCompile(`[^a-z0-9]+`)

// newTestBroker checks that the broker answers on AMQP and on the management
// API, and gives the test a unique prefix whose queues it deletes in
// t.Cleanup. Register it before anything that publishes, so that cleanup
// runs last.
func newTestBroker(t testing.TB) *testBroker {
	t.Helper()
	url := envOr("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	endpoint := strings.TrimSuffix(envOr("QUEUEY_ENDPOINT", "http://127.0.0.1:15672"), "/")
	ac, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("cannot connect to %s (is RabbitMQ running?): %v", url, err)
	}
	_ = ac.Close()
	api, err := rabbithole.NewClient(endpoint, envOr("QUEUEY_USERNAME", "guest"), envOr("QUEUEY_PASSWORD", "guest"))
	if err != nil {
		t.Fatalf("management API client for %s (is RabbitMQ running?): %v", endpoint, err)
	}
	api.SetTimeout(10 * time.Second)
	if _, err := api.Overview(); err != nil {
		t.Fatalf("cannot reach the management API at %s (is RabbitMQ running, with the management plugin?): %v", endpoint, err)
	}
	uri, err := amqp.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := strings.Trim(unsafeInPrefix.ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "TestIntegration")), "-"), "-")
	if len(name) > 40 {
		name = strings.TrimRight(name[:40], "-")
	}
	b := &testBroker{t: t, url: url, api: api, vhost: uri.Vhost, prefix: "qt-" + hex.EncodeToString(rnd[:]) + "-" + name}
	t.Cleanup(b.deleteAll)
	return b
}

// deleteAll deletes every queue under the test's prefix.
func (b *testBroker) deleteAll() {
	qs, err := b.api.ListQueuesIn(b.vhost)
	if err != nil {
		b.t.Errorf("cleanup: list queues: %v", err)
		return
	}
	for _, q := range qs {
		if strings.HasPrefix(q.Name, b.prefix+".") {
			if _, err := b.api.DeleteQueue(b.vhost, q.Name); err != nil && !isNotFound(err) {
				b.t.Errorf("cleanup: delete queue %s: %v", q.Name, err)
			}
		}
	}
}

func isNotFound(err error) bool {
	var re rabbithole.ErrorResponse
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}

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
	qs, err := b.api.ListQueuesIn(b.vhost)
	if err != nil {
		b.t.Fatalf("management API: list queues: %v", err)
	}
	var names []string
	for _, q := range qs {
		if strings.HasPrefix(q.Name, b.prefix+".") {
			names = append(names, q.Name)
		}
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
	ac, err := amqp.Dial(b.url)
	if err != nil {
		b.t.Fatalf("cannot connect to %s (is RabbitMQ running?): %v", b.url, err)
	}
	b.t.Cleanup(func() { _ = ac.Close() })
	ch, err := ac.Channel()
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
