package provider

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// testAccProviders serves the provider in-process to the real Terraform
// binary that terraform-plugin-testing runs (TF_ACC_TERRAFORM_PATH, or
// terraform on PATH; nothing is downloaded).
var testAccProviders = map[string]func() (tfprotov6.ProviderServer, error){
	"queuey": providerserver.NewProtocol6WithError(New("test")()),
}

// terraformState is what a TestCheckFunc is handed.
type terraformState = terraform.State

// testEnv is where the acceptance tests find the broker: the shared
// fixture's (internal/brokertest), whose defaults are a local RabbitMQ with
// the management plugin.
type testEnv struct {
	endpoint, username, password, amqpURL string
}

func getTestEnv() testEnv {
	e := brokertest.FromEnv()
	return testEnv{endpoint: e.Endpoint, username: e.Username, password: e.Password, amqpURL: e.AMQPURL}
}

// testBroker is the acceptance tests' own line to the broker, to check
// what the provider did there rather than what it wrote in state.
type testBroker struct {
	t      *testing.T
	shared *brokertest.Broker
	env    testEnv
	mgmt   *rabbithole.Client
	conn   *amqp.Connection
}

// newTestBroker fails the test, never skips it, when the broker is not
// there: TF_ACC means the acceptance tests were asked for.
func newTestBroker(t *testing.T) *testBroker {
	t.Helper()
	brokertest.Acceptance(t)
	return openTestBroker(t, brokertest.FromEnv())
}

// openTestBroker is newTestBroker on the broker of env.
func openTestBroker(t *testing.T, e brokertest.Env) *testBroker {
	t.Helper()
	s := brokertest.Open(t, e)
	env := testEnv{endpoint: e.Endpoint, username: e.Username, password: e.Password, amqpURL: e.AMQPURL}
	return &testBroker{t: t, shared: s, env: env, mgmt: s.API, conn: s.Dial()}
}

// uniquePrefix gives each test its own queues, and deletes whatever is left
// of them when the test ends, passed or not. It has a fixed length
// (brokertest.Unique, without the test's name): the expected errors are
// matched against Terraform's diagnostics, which it wraps.
func (b *testBroker) uniquePrefix(name string) string {
	return b.shared.Own(brokertest.Unique("tfacc-" + name))
}

// queues lists the broker's queues of a prefix.
func (b *testBroker) queues(prefix string) map[string]rabbithole.QueueInfo {
	b.t.Helper()
	out := map[string]rabbithole.QueueInfo{}
	for _, q := range b.shared.Queues(prefix) {
		out[q.Name] = q
	}
	return out
}

// checkQueues checks that the broker has exactly the queues of prefix in
// want, each with its durability and arguments.
func (b *testBroker) checkQueues(prefix string, want map[string]wantQueue) resource.TestCheckFunc {
	return func(*terraformState) error {
		got := b.queues(prefix)
		if len(got) != len(want) {
			names := make([]string, 0, len(got))
			for n := range got {
				names = append(names, n)
			}
			return fmt.Errorf("broker has %d queues under %q (%v), want %d", len(got), prefix, names, len(want))
		}
		for name, w := range want {
			q, ok := got[name]
			if !ok {
				return fmt.Errorf("broker has no queue %q", name)
			}
			if q.Durable != w.durable {
				return fmt.Errorf("queue %q durable = %t, want %t", name, q.Durable, w.durable)
			}
			if q.Type != "classic" {
				return fmt.Errorf("queue %q type = %q, want classic", name, q.Type)
			}
			// The type was checked above; RabbitMQ 4 also lists it among
			// the arguments.
			args := topology.WithoutDefaults(normalizeArgs(q.Arguments))
			if len(args) != len(w.args) {
				return fmt.Errorf("queue %q arguments = %v, want %v", name, args, w.args)
			}
			for k, v := range w.args {
				if args[k] != v {
					return fmt.Errorf("queue %q argument %s = %#v, want %#v", name, k, args[k], v)
				}
			}
		}
		return nil
	}
}

// wantQueue is a queue as the broker should have it.
type wantQueue struct {
	durable bool
	args    map[string]any
}

// publish puts n persistent messages on a queue through the default
// exchange, with publisher confirms, so they are there when it returns.
func (b *testBroker) publish(queue string, n int) {
	b.t.Helper()
	ch, err := b.conn.Channel()
	if err != nil {
		b.t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		b.t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(fmt.Sprintf("message %d", i))})
		if err != nil {
			b.t.Fatal(err)
		}
		if ok, err := c.WaitContext(context.Background()); err != nil || !ok {
			b.t.Fatalf("publish to %s not confirmed: %v", queue, err)
		}
	}
}

// count is a queue's message count from a passive declare, which is exact
// at once, unlike the management API's.
func (b *testBroker) count(queue string) (int, error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	return q.Messages, nil
}

func (b *testBroker) checkCount(queue string, want int) resource.TestCheckFunc {
	return func(*terraformState) error {
		got, err := b.count(queue)
		if err != nil {
			return fmt.Errorf("counting %s: %w", queue, err)
		}
		if got != want {
			return fmt.Errorf("queue %s holds %d messages, want %d", queue, got, want)
		}
		return nil
	}
}

// waitManagementCount waits until the management API's count of a queue,
// which refreshes every few seconds, reaches want: the provider decides on
// that count, so a test that expects it in an error waits for it first.
func (b *testBroker) waitManagementCount(queue string, want int) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		q, err := b.mgmt.GetQueueWithParameters("/", queue, url.Values{"columns": {"name,messages"}})
		if err == nil && q.Messages == want {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("the management API did not report %d messages in %s within 30s (last: %+v, %v)", want, queue, q, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkDestroyed is a CheckDestroy: nothing of the prefix is left.
func (b *testBroker) checkDestroyed(prefix string) resource.TestCheckFunc {
	return func(*terraformState) error {
		if left := b.queues(prefix); len(left) > 0 {
			return fmt.Errorf("%d queues of %q are left after destroy", len(left), prefix)
		}
		return nil
	}
}

// providerBlock configures the provider for the test broker: its
// management API, or endpoint when one is given, and its AMQP URL, which
// migrations use, so that a test of another broker migrates there.
func (b *testBroker) providerBlock(endpoint string) string {
	if endpoint == "" {
		endpoint = b.env.endpoint
	}
	return fmt.Sprintf(`
provider "queuey" {
  endpoint = %q
  amqp_url = %q
  username = %q
  password = %q
}
`, endpoint, b.env.amqpURL, b.env.username, b.env.password)
}

// countingProxy sits between the provider and the management API and
// records every request, to show how many a refresh makes.
type countingProxy struct {
	mu       sync.Mutex
	requests []string
	server   *httptest.Server
}

func newCountingProxy(t *testing.T, target string) *countingProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	p.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.requests = append(p.requests, r.Method+" "+r.URL.EscapedPath())
		p.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(p.server.Close)
	return p
}

func (p *countingProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = nil
}

func (p *countingProxy) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests...)
}

func TestAccProvider_unreachableBroker(t *testing.T) {
	b := newTestBroker(t)
	prefix := b.uniquePrefix("unreach")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			// Port 1 on loopback refuses connections at once.
			Config: b.providerBlock("http://127.0.0.1:1/") + fmt.Sprintf(`
resource "queuey_queue_set" "test" {
  prefix = %q
  queues = { a = {} }
}`, prefix),
			ExpectError: regexp.MustCompile(`(?s)Cannot Reach RabbitMQ.*management plugin`),
		}},
	})
}

func TestAccProvider_wrongCredentials(t *testing.T) {
	b := newTestBroker(t)
	prefix := b.uniquePrefix("creds")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
provider "queuey" {
  endpoint = %q
  username = "queuey-no-such-user"
  password = "wrong"
}
resource "queuey_queue_set" "test" {
  prefix = %q
  queues = { a = {} }
}`, b.env.endpoint, prefix),
			ExpectError: regexp.MustCompile(`(?s)RabbitMQ Refused The Credentials.*queuey-no-such-user`),
		}},
	})
}

// rabbitQueue is a declaration for the tests' own queues, made behind the
// provider's back.
func rabbitQueue(durable bool, args map[string]any) rabbithole.QueueSettings {
	return rabbithole.QueueSettings{Durable: durable, Arguments: args}
}

// planWarnings records the warnings the provider returns from every plan
// and refresh Terraform asks it for, so that a test can see what an operator sees
// above "Do you want to perform these actions?".
type planWarnings struct {
	mu       sync.Mutex
	warnings []tfprotov6.Diagnostic
}

func (w *planWarnings) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = nil
}

func (w *planWarnings) seen() []tfprotov6.Diagnostic {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]tfprotov6.Diagnostic(nil), w.warnings...)
}

// providers serves the provider like testAccProviders, recording its plan
// warnings.
func (w *planWarnings) providers() map[string]func() (tfprotov6.ProviderServer, error) {
	return map[string]func() (tfprotov6.ProviderServer, error){
		"queuey": func() (tfprotov6.ProviderServer, error) {
			s, err := providerserver.NewProtocol6WithError(New("test")())()
			return recordingServer{ProviderServer: s, w: w}, err
		},
	}
}

// check is a TestCheckFunc: every warning since the last reset is a
// "Queue Will Be Replaced" about queues[queue], there is at least one, and
// each detail matches detail. The "Transient Queue Deprecated" of a
// durable = false queue on RabbitMQ 3.13 and later is left out.
func (w *planWarnings) check(queue string, detail *regexp.Regexp) resource.TestCheckFunc {
	return func(*terraformState) error {
		var seen []tfprotov6.Diagnostic
		for _, d := range w.seen() {
			if d.Summary != summaryTransientDeprecated {
				seen = append(seen, d)
			}
		}
		if len(seen) == 0 {
			return fmt.Errorf("the plan gave no warning, want one about queue %q", queue)
		}
		for _, d := range seen {
			steps := d.Attribute.Steps()
			if d.Summary != "Queue Will Be Replaced" || len(steps) != 2 ||
				steps[0] != tftypes.AttributeName("queues") || steps[1] != tftypes.ElementKeyString(queue) {
				return fmt.Errorf("plan warning %q at %v: %s; want warnings about queues[%q] alone", d.Summary, d.Attribute, d.Detail, queue)
			}
			if !detail.MatchString(d.Detail) {
				return fmt.Errorf("plan warning %q does not match %s", d.Detail, detail)
			}
		}
		return nil
	}
}

type recordingServer struct {
	tfprotov6.ProviderServer
	w *planWarnings
}

func (s recordingServer) PlanResourceChange(ctx context.Context, req *tfprotov6.PlanResourceChangeRequest) (*tfprotov6.PlanResourceChangeResponse, error) {
	resp, err := s.ProviderServer.PlanResourceChange(ctx, req)
	if resp != nil {
		s.w.record(resp.Diagnostics)
	}
	return resp, err
}

// ReadResource records the refresh's warnings too: a plan shows them above
// its own, so an operator reads them as the plan's.
func (s recordingServer) ReadResource(ctx context.Context, req *tfprotov6.ReadResourceRequest) (*tfprotov6.ReadResourceResponse, error) {
	resp, err := s.ProviderServer.ReadResource(ctx, req)
	if resp != nil {
		s.w.record(resp.Diagnostics)
	}
	return resp, err
}

func (w *planWarnings) record(diags []*tfprotov6.Diagnostic) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range diags {
		if d.Severity == tfprotov6.DiagnosticSeverityWarning {
			w.warnings = append(w.warnings, *d)
		}
	}
}

// none is a TestCheckFunc: no warning since the last reset.
func (w *planWarnings) none() resource.TestCheckFunc { return w.noneBut() }

// noneBut is a TestCheckFunc: no warning since the last reset but those
// with one of summaries, such as the "Transient Queue Deprecated" that
// RabbitMQ 3.13 and later earn a set with a durable = false queue.
func (w *planWarnings) noneBut(summaries ...string) resource.TestCheckFunc {
	return func(*terraformState) error {
		for _, d := range w.seen() {
			if !slices.Contains(summaries, d.Summary) {
				return fmt.Errorf("the plan warned %q: %s; want no warning", d.Summary, d.Detail)
			}
		}
		return nil
	}
}

// deleteQueues deletes queues behind the provider's back.
func (b *testBroker) deleteQueues(names ...string) {
	b.t.Helper()
	for _, n := range names {
		if _, err := b.mgmt.DeleteQueue("/", n); err != nil {
			b.t.Fatalf("deleting %s: %v", n, err)
		}
	}
}
