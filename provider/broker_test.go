package provider

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
)

func TestRunAllBoundsConcurrency(t *testing.T) {
	t.Parallel()
	var running, peak atomic.Int32
	tasks := make([]func() error, 40)
	for i := range tasks {
		tasks[i] = func() error {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
			running.Add(-1)
			if i == 7 {
				return errors.New("seven")
			}
			return nil
		}
	}
	errs := runAll(context.Background(), declareWorkers, tasks)
	if p := peak.Load(); p > declareWorkers || p < 2 {
		t.Errorf("peak concurrency %d, want 2..%d", p, declareWorkers)
	}
	for i, err := range errs {
		if (err != nil) != (i == 7) {
			t.Errorf("task %d: %v", i, err)
		}
	}
}

func TestBrokerDiagnostic(t *testing.T) {
	t.Parallel()
	b, err := newBroker("http://127.0.0.1:15672/", "alice", "secret", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		err     error
		summary string
		detail  string
	}{
		{errors.New("Error: API responded with a 401 Unauthorized"), "RabbitMQ Refused The Credentials", `as user "alice"`},
		{rabbithole.ErrorResponse{StatusCode: 403, Message: "access_refused"}, "RabbitMQ Denied Access", "permissions"},
		{rabbithole.ErrorResponse{StatusCode: 500, Message: "boom"}, "Read Queue Set Error", "boom"},
	} {
		summary, detail := b.brokerDiagnostic("Read Queue Set Error", `list the queues of virtual host "/"`, c.err)
		if summary != c.summary || !strings.Contains(detail, c.detail) || !strings.Contains(detail, "at http://127.0.0.1:15672") || strings.Contains(detail, "15672/") {
			t.Errorf("%v: %q / %q", c.err, summary, detail)
		}
		if strings.Contains(detail, "secret") {
			t.Errorf("the password is in the diagnostic: %q", detail)
		}
	}
}

// TestBrokerDiagnosticTLSMismatch pins a bug: a client certificate the
// management API refused, and http:// against an HTTPS port, were
// reported as "Cannot Reach RabbitMQ ... got no answer", which sends the
// user to check that the broker runs. Each now says what was wrong and
// what to change. The servers are real TLS stacks (crypto/tls through
// httptest), and, where RabbitMQ's own listener answers otherwise, a
// listener that answers with the bytes RabbitMQ 3.10 was seen to send.
func TestBrokerDiagnosticTLSMismatch(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("[]")) })
	clientCAs, certPEM, keyPEM := newClientCertificate(t)
	_, rogueCertPEM, rogueKeyPEM := newClientCertificate(t)
	mutual := httptest.NewUnstartedServer(ok)
	mutual.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs}
	mutual.StartTLS()
	t.Cleanup(mutual.Close)
	https := httptest.NewTLSServer(ok)
	t.Cleanup(https.Close)
	plain := httptest.NewServer(ok)
	t.Cleanup(plain.Close)
	// RabbitMQ's TLS listener answers a plain HTTP request with a fatal
	// unexpected_message alert; its AMQP listener with its protocol header.
	rabbitTLS := answeringServer(t, []byte("\x15\x03\x01\x00\x02\x02\x0a"))
	amqpPort := answeringServer(t, []byte("AMQP\x00\x00\x09\x01"))
	closing := closingTLSServer(t, https.TLS)

	roots := x509.NewCertPool()
	roots.AddCert(mutual.Certificate())
	roots.AddCert(https.Certificate())
	keyPair := func(certPEM, keyPEM []byte) []tls.Certificate {
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{c}
	}
	transport := func(version uint16, certs []tls.Certificate) *http.Transport {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MaxVersion: version, Certificates: certs}
		return tr
	}
	hostOf := func(u string) string { return strings.TrimPrefix(strings.TrimPrefix(u, "https://"), "http://") }

	type check struct {
		name      string
		endpoint  string
		transport *http.Transport
		summary   string // a regexp
		details   []string
	}
	checks := []check{
		{"mutual TLS, the right certificate", mutual.URL, transport(tls.VersionTLS13, keyPair(certPEM, keyPEM)), "", nil},
		{"plain HTTP to plain HTTP", plain.URL, nil, "", nil},
		{"refused port, http", "http://127.0.0.1:1", nil, `^Cannot Reach RabbitMQ$`, []string{"management plugin"}},
		{"refused port, https", "https://127.0.0.1:1", transport(tls.VersionTLS13, nil), `^Cannot Reach RabbitMQ$`, []string{"management plugin"}},
		{"http:// to a Go HTTPS server", "http://" + hostOf(https.URL), nil, `^RabbitMQ Endpoint Expects HTTPS$`,
			[]string{"uses http:// but the port speaks TLS", "https://" + hostOf(https.URL), "HTTP request to an HTTPS server"}},
		{"http:// to RabbitMQ's TLS listener", "http://" + hostOf(rabbitTLS), nil, `^RabbitMQ Endpoint Expects HTTPS$`,
			[]string{"uses http:// but the port speaks TLS", "https://" + hostOf(rabbitTLS)}},
		{"https:// to plain HTTP", "https://" + hostOf(plain.URL), transport(tls.VersionTLS13, nil), `^RabbitMQ Endpoint Does Not Speak HTTPS$`,
			[]string{"uses https:// but the port does not speak TLS", "http://" + hostOf(plain.URL)}},
		{"http:// to the AMQP port", "http://" + hostOf(amqpPort), nil, `^RabbitMQ Endpoint Is The AMQP Port$`,
			[]string{"AMQP listener", "15672", "amqp_url"}},
		{"https:// to a server that closes after the handshake", "https://" + hostOf(closing), transport(tls.VersionTLS13, nil), `^RabbitMQ Closed The TLS Connection$`,
			[]string{"client_cert_file and client_key_file", "restarting"}},
	}
	for _, v := range []struct {
		name    string
		version uint16
		// Under TLS 1.3 the client's handshake is over before the server
		// checks its certificate; the alert may be lost to a reset.
		summary string
	}{
		{"TLS 1.2", tls.VersionTLS12, `^RabbitMQ Refused The Client Certificate$`},
		{"TLS 1.3", tls.VersionTLS13, `^RabbitMQ (Refused The Client Certificate|Closed The TLS Connection)$`},
	} {
		checks = append(checks,
			check{v.name + ", no client certificate", mutual.URL, transport(v.version, nil), v.summary,
				[]string{"presented no client certificate", "client_cert_file and client_key_file", "management.ssl.fail_if_no_peer_cert"}},
			check{v.name + ", a client certificate from another CA", mutual.URL, transport(v.version, keyPair(rogueCertPEM, rogueKeyPEM)), v.summary,
				[]string{"may have refused it", "client_cert_file and client_key_file", "management.ssl.cacertfile"}})
	}
	for _, c := range checks {
		var rt http.RoundTripper
		if c.transport != nil {
			rt = c.transport
		}
		b, err := newBroker(c.endpoint, "alice", "secret", rt)
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.listQueues("/")
		if c.summary == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: listing queues succeeded", c.name)
			continue
		}
		summary, detail := b.brokerDiagnostic("Read Queue Set Error", `list the queues of virtual host "/"`, err)
		t.Logf("%s: %s: %v", c.name, summary, err)
		if !regexp.MustCompile(c.summary).MatchString(summary) {
			t.Errorf("%s: summary %q, want %s\n(detail %q)", c.name, summary, c.summary, detail)
		}
		for _, want := range append(c.details, "at "+c.endpoint, err.Error()) {
			if !strings.Contains(detail, want) {
				t.Errorf("%s: the detail does not say %q: %q", c.name, want, detail)
			}
		}
		if strings.Contains(detail, "got no answer") != strings.HasPrefix(summary, "Cannot Reach") {
			t.Errorf("%s: %q says %q", c.name, summary, detail)
		}
	}
}

// TestPlainHTTPCheckPassesOtherAnswers shows that recognising a TLS port's
// answer to plain HTTP leaves RabbitMQ's own 400 answers as they were.
func TestPlainHTTPCheckPassesOtherAnswers(t *testing.T) {
	t.Parallel()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"bad_request","reason":"inequivalent arg 'x-max-priority' for queue 'q' in vhost '/': received the value '5' of type 'signedint' but current is none"}`))
	}))
	t.Cleanup(s.Close)
	b, err := newBroker(s.URL, "alice", "secret", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.declare("/", "q", true, map[string]any{"x-max-priority": int64(5)}); !errors.Is(err, errInequivalent) || !strings.Contains(err.Error(), "received the value '5'") {
		t.Errorf("declare = %v, want errInequivalent with the broker's reason", err)
	}
}

// answeringServer accepts connections on loopback and answers whatever it
// is sent with answer, then closes: a server that does not speak HTTP.
func answeringServer(t *testing.T, answer []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, func(c net.Conn) {
		defer c.Close()
		_, _ = c.Read(make([]byte, 4096))
		_, _ = c.Write(answer)
	})
	return "http://" + ln.Addr().String()
}

// closingTLSServer completes TLS handshakes on loopback with cfg and then
// resets the connection without a word, as a broker does that refuses a
// client certificate after a TLS 1.3 handshake, when the alert is lost.
func closingTLSServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg.Clone())
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, func(c net.Conn) {
		tc := c.(*tls.Conn)
		if tc.Handshake() == nil {
			if tcp, ok := tc.NetConn().(*net.TCPConn); ok {
				_ = tcp.SetLinger(0)
			}
		}
		_ = tc.NetConn().Close()
	})
	return "https://" + ln.Addr().String()
}

// serve hands every connection ln accepts to handle, each on its own
// goroutine, until the test ends and closes ln.
func serve(t *testing.T, ln net.Listener, handle func(net.Conn)) {
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
}

// TestReadsAQueueWhoseConsumerChannelIsClosing: while a consumer's channel
// closes, RabbitMQ writes its channel_details as [] where rabbit-hole
// expects an object, and decoding the whole queue fails. The stub answers
// so unless the request names columns; both reads of the provider must get
// the queue.
func TestReadsAQueueWhoseConsumerChannelIsClosing(t *testing.T) {
	t.Parallel()
	const withColumns = `{"name":"q","durable":true,"type":"classic","arguments":{"x-max-priority":5},"messages":3}`
	const whole = `{"name":"q","durable":true,"type":"classic","arguments":{"x-max-priority":5},"messages":3,"consumer_details":[{"channel_details":[],"consumer_tag":"w"}]}`
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		body := whole
		if r.URL.Query().Get("columns") != "" {
			body = withColumns
		}
		if r.URL.Path == "/api/queues/%2F" || r.URL.Path == "/api/queues//" {
			body = "[" + body + "]"
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(s.Close)
	b, err := newBroker(s.URL, "alice", "secret", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := brokerQueue{Name: "q", Durable: true, Type: "classic", Arguments: map[string]any{"x-max-priority": int64(5)}, Messages: 3}
	q, found, err := b.getQueue("/", "q")
	if err != nil || !found || !reflect.DeepEqual(q, want) {
		t.Errorf("getQueue = %+v, %v, %v; want %+v", q, found, err, want)
	}
	all, err := b.listQueues("/")
	if err != nil || !reflect.DeepEqual(all["q"], want) {
		t.Errorf("listQueues = %+v, %v; want q: %+v", all, err, want)
	}
}
