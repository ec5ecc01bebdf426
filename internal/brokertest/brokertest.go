// Package brokertest is the one test fixture for a real RabbitMQ, shared by
// the integration, acceptance and fault tests of every package: where the
// broker is (the environment, with local defaults), a prefix of each test's
// own, the deletion of every queue under it when the test ends, and the one
// message a test fails with when the broker does not answer.
//
// Only test files import it. It does not import "testing" (TB is the part of
// testing.TB it uses), so importing it links no test machinery into a
// binary either way.
//
// Every queue a test makes is named under its prefix: work queues
// (prefix.name), dead queues (prefix.name.dead), hold queues
// (prefix.name.deferred.N) and a migration's queues (prefix.name.migrating,
// prefix.name.migrating.divert). The clean-up deletes every queue whose name
// starts with the prefix and a dot, so it deletes all of those.
package brokertest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The local broker's defaults, as scripts/broker.sh (make broker) starts it.
const (
	DefaultAMQPURL  = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultEndpoint = "http://127.0.0.1:15672"
	DefaultUsername = "guest"
	DefaultPassword = "guest"
)

// TB is the part of testing.TB the fixture uses; *testing.T and *testing.B
// have it.
type TB interface {
	Helper()
	Name() string
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
}

// EnvOr is the environment variable name, or def when it is unset or empty.
func EnvOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Env is where a broker is: its AMQP URL, and its management API's endpoint
// and credentials.
type Env struct {
	AMQPURL, Endpoint, Username, Password string
}

// FromEnv is the broker the tests use: AMQP_URL, QUEUEY_ENDPOINT,
// QUEUEY_USERNAME and QUEUEY_PASSWORD, or the local defaults. The endpoint
// has no trailing slash.
func FromEnv() Env {
	return Env{
		AMQPURL:  EnvOr("AMQP_URL", DefaultAMQPURL),
		Endpoint: strings.TrimRight(EnvOr("QUEUEY_ENDPOINT", DefaultEndpoint), "/"),
		Username: EnvOr("QUEUEY_USERNAME", DefaultUsername),
		Password: EnvOr("QUEUEY_PASSWORD", DefaultPassword),
	}
}

// Strict is the broker of QUEUEY_STRICT_AMQP_URL and QUEUEY_STRICT_ENDPOINT
// (same credentials as FromEnv): one that refuses transient non-exclusive
// queues, as RabbitMQ 4.3 does by default. `bash scripts/broker4.sh start
// strict` starts one and `bash scripts/broker4.sh env strict` prints where;
// scripts/test.sh sets both variables, so there the tests that need it run
// and never skip.
func Strict(t TB) Env {
	t.Helper()
	env := FromEnv()
	env.AMQPURL, env.Endpoint = os.Getenv("QUEUEY_STRICT_AMQP_URL"), strings.TrimRight(os.Getenv("QUEUEY_STRICT_ENDPOINT"), "/")
	if env.AMQPURL == "" || env.Endpoint == "" {
		t.Skip("needs a broker that refuses transient queues: `bash scripts/broker4.sh start strict`, then set QUEUEY_STRICT_AMQP_URL and QUEUEY_STRICT_ENDPOINT to what `bash scripts/broker4.sh env strict` prints")
	}
	return env
}

// Unreachable is the error of a test whose broker did not answer: what
// (AMQP, the management API) at where, and how to start one.
func Unreachable(what, where string, err error) error {
	return fmt.Errorf("%s at %s did not answer (is RabbitMQ running, with the management plugin? `make broker` starts it): %w", what, where, err)
}

// Acceptance skips t unless TF_ACC is set: acceptance tests run only when
// asked for, and then fail, never skip, when the broker is not there.
func Acceptance(t TB) {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance tests run with TF_ACC=1")
	}
}

// Broker is a broker as one test sees it.
type Broker struct {
	Env
	// API is a management API client, with a timeout.
	API *rabbithole.Client
	// Vhost is the virtual host of AMQPURL.
	Vhost string
	// Prefix is the test's own (New): every queue under it is deleted when
	// the test ends.
	Prefix string

	t TB
}

// New is Open on the broker of FromEnv, with a prefix of the test's own
// (NewPrefix) as Prefix. Call it before anything that publishes or
// consumes, so that its clean-up runs last.
func New(t TB, tag string) *Broker {
	t.Helper()
	b := Open(t, FromEnv())
	b.Prefix = b.NewPrefix(tag)
	return b
}

// Open checks that the broker of env answers on AMQP and on the management
// API, and fails t when it does not.
func Open(t TB, env Env) *Broker {
	t.Helper()
	ac, err := amqp.Dial(env.AMQPURL)
	if err != nil {
		t.Fatalf("%v", Unreachable("AMQP", env.AMQPURL, err))
	}
	_ = ac.Close()
	api, err := rabbithole.NewClient(env.Endpoint, env.Username, env.Password)
	if err == nil {
		api.SetTimeout(10 * time.Second)
		_, err = api.Overview()
	}
	if err != nil {
		t.Fatalf("%v", Unreachable("the management API", env.Endpoint, err))
	}
	uri, err := amqp.ParseURI(env.AMQPURL)
	if err != nil {
		t.Fatalf("AMQP URL %s: %v", env.AMQPURL, err)
	}
	return &Broker{Env: env, API: api, Vhost: uri.Vhost, t: t}
}

// NewPrefix is a prefix of the test's own (Prefix, with tag) whose queues
// are deleted when the test ends.
func (b *Broker) NewPrefix(tag string) string { return b.Own(Prefix(b.t, tag)) }

// Own has every queue under prefix deleted when the test ends, and returns
// prefix.
func (b *Broker) Own(prefix string) string {
	b.t.Cleanup(func() {
		if err := DeleteUnder(b.API, b.Vhost, prefix); err != nil {
			b.t.Errorf("cleanup: %v", err)
		}
	})
	return prefix
}

// Name is the broker name of a logical queue under the test's prefix.
func (b *Broker) Name(logical string) string { return b.Prefix + "." + logical }

// Dial opens an AMQP connection for the test, closed when it ends.
func (b *Broker) Dial() *amqp.Connection {
	b.t.Helper()
	ac, err := amqp.Dial(b.AMQPURL)
	if err != nil {
		b.t.Fatalf("%v", Unreachable("AMQP", b.AMQPURL, err))
	}
	b.t.Cleanup(func() { _ = ac.Close() })
	return ac
}

// Queues lists the queues under prefix in the test's virtual host.
func (b *Broker) Queues(prefix string) []rabbithole.QueueInfo {
	b.t.Helper()
	qs, err := Under(b.API, b.Vhost, prefix)
	if err != nil {
		b.t.Fatalf("%v", err)
	}
	return qs
}

var unsafeInPrefix = regexp.MustCompile(`[^a-z0-9]+`)

// Prefix is a prefix no other test run uses (Unique, with tag) and the
// test's name in lower case without its Test, TestIntegration or TestAcc,
// cut to 40 characters, so that a queue left behind names its test.
func Prefix(t TB, tag string) string {
	name := t.Name()
	for _, p := range []string{"TestIntegration", "TestAcc", "Test"} {
		if n, ok := strings.CutPrefix(name, p); ok {
			name = n
			break
		}
	}
	name = strings.Trim(unsafeInPrefix.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(name) > 40 {
		name = strings.TrimRight(name[:40], "-")
	}
	if name == "" {
		return Unique(tag)
	}
	return Unique(tag) + "-" + name
}

// Unique is tag and eight random hex digits: a prefix no other test run
// uses, of a fixed length, for tests whose expected output depends on it
// (Terraform wraps the text of its diagnostics).
func Unique(tag string) string {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	return tag + "-" + hex.EncodeToString(rnd[:])
}

// Under lists the queues of vhost whose names start with prefix and a dot.
func Under(api *rabbithole.Client, vhost, prefix string) ([]rabbithole.QueueInfo, error) {
	qs, err := api.ListQueuesIn(vhost)
	if err != nil {
		return nil, fmt.Errorf("management API: list queues: %w", err)
	}
	var out []rabbithole.QueueInfo
	for _, q := range qs {
		if strings.HasPrefix(q.Name, prefix+".") {
			out = append(out, q)
		}
	}
	return out, nil
}

// DeleteUnder deletes every queue of vhost under prefix (Under), whatever it
// holds. A queue that is gone already counts as deleted.
func DeleteUnder(api *rabbithole.Client, vhost, prefix string) error {
	qs, err := Under(api, vhost, prefix)
	if err != nil {
		return err
	}
	var errs []error
	for _, q := range qs {
		if _, err := api.DeleteQueue(vhost, q.Name); err != nil && !IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete queue %s: %w", q.Name, err))
		}
	}
	return errors.Join(errs...)
}

// IsNotFound reports whether err is the management API answering 404.
func IsNotFound(err error) bool {
	var re rabbithole.ErrorResponse
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}
