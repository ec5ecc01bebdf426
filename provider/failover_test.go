package provider

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
)

// failoverBundle is a failover over endpoints, recording which of them
// each request was sent to.
type failoverBundle struct {
	f    *failover
	mu   sync.Mutex
	sent []string
}

func newFailoverBundle(t *testing.T, endpoints ...string) *failoverBundle {
	t.Helper()
	urls, problem := parseEndpoints(strings.Join(endpoints, ","))
	if problem != "" {
		t.Fatal(problem)
	}
	b := &failoverBundle{}
	b.f = newFailover(urls, roundTripFunc(func(r *http.Request) (*http.Response, error) {
		b.mu.Lock()
		b.sent = append(b.sent, r.URL.Scheme+"://"+r.URL.Host)
		b.mu.Unlock()
		return http.DefaultTransport.RoundTrip(r)
	}))
	return b
}

// do sends method to path through the failover, as a request built for
// the first endpoint (as rabbit-hole builds them), and returns the answer's
// status and body, and which endpoints it went to.
func (b *failoverBundle) do(t *testing.T, method, path, body string) (int, string, []string, error) {
	t.Helper()
	b.mu.Lock()
	b.sent = nil
	b.mu.Unlock()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.f.endpoints[0].String()+path, r)
	if err != nil {
		t.Fatal(err)
	}
	res, err := (&http.Client{Transport: b.f}).Do(req)
	b.mu.Lock()
	sent := slices.Clone(b.sent)
	b.mu.Unlock()
	if err != nil {
		return 0, "", sent, err
	}
	defer res.Body.Close()
	got, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(got), sent, nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// refusingEndpoint is the URL of loopback port port (1 to 9), which nothing
// listens on and which, unlike a port a test listened on and closed, no
// other test's server can be given meanwhile.
func refusingEndpoint(t *testing.T, port int) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if c, err := net.Dial("tcp", addr); err == nil {
		_ = c.Close()
		t.Fatalf("something listens on %s", addr)
	}
	return "http://" + addr
}

// echoServer answers every request with 200 and what it received: method,
// path, Host header and body.
func echoServer(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s host=%s body=%s", r.Method, r.URL.Path, r.Host, body)
	}))
	t.Cleanup(s.Close)
	return s
}

// statusServer answers every request with status.
func statusServer(t *testing.T, status int) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":"not ready","reason":"node is booting"}`, status)
	}))
	t.Cleanup(s.Close)
	return s
}

// droppingServer reads each request in full, then closes the connection
// without an answer: a node that died while handling it.
func droppingServer(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func TestFailoverPassesARefusedEndpointAndRemembersTheNext(t *testing.T) {
	t.Parallel()
	dead, live := refusingEndpoint(t, 1), echoServer(t)
	b := newFailoverBundle(t, dead, live.URL)
	status, body, sent, err := b.do(t, http.MethodGet, "/api/overview", "")
	if err != nil || status != http.StatusOK || !slices.Equal(sent, []string{dead, live.URL}) {
		t.Fatalf("GET = %d %q, %v, sent to %q; want 200 from %s after %s", status, body, err, sent, live.URL, dead)
	}
	// The request was rewritten for the live endpoint, Host header too.
	if want := "GET /api/overview host=" + strings.TrimPrefix(live.URL, "http://"); !strings.HasPrefix(body, want) {
		t.Errorf("the live endpoint received %q, want %q", body, want)
	}
	// Later requests start at the endpoint that answered.
	for range 3 {
		if _, _, sent, err := b.do(t, http.MethodGet, "/api/overview", ""); err != nil || !slices.Equal(sent, []string{live.URL}) {
			t.Fatalf("a later GET went to %q (%v), want %s alone", sent, err, live.URL)
		}
	}
}

func TestFailoverPasses503And502(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusBadGateway} {
		booting, live := statusServer(t, status), echoServer(t)
		b := newFailoverBundle(t, booting.URL, live.URL)
		got, _, sent, err := b.do(t, http.MethodGet, "/api/queues/%2F", "")
		if err != nil || got != http.StatusOK || !slices.Equal(sent, []string{booting.URL, live.URL}) {
			t.Fatalf("GET past a %d = %d, %v, sent to %q; want 200 from the second", status, got, err, sent)
		}
		if _, _, sent, _ := b.do(t, http.MethodGet, "/api/queues/%2F", ""); !slices.Equal(sent, []string{live.URL}) {
			t.Fatalf("a later GET went to %q, want %s alone", sent, live.URL)
		}
	}
}

// Any other answer is the cluster's, which another node would repeat: it
// is returned, not failed over.
func TestFailoverReturnsOtherAnswers(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusNotFound, http.StatusUnauthorized, http.StatusInternalServerError} {
		first, second := statusServer(t, status), echoServer(t)
		b := newFailoverBundle(t, first.URL, second.URL)
		got, _, sent, err := b.do(t, http.MethodGet, "/api/queues/%2F/q", "")
		if err != nil || got != status || !slices.Equal(sent, []string{first.URL}) {
			t.Errorf("GET answered %d = %d, %v, sent to %q; want that answer from the first alone", status, got, err, sent)
		}
	}
}

func TestFailoverErrorNamesEveryEndpoint(t *testing.T) {
	t.Parallel()
	dead1, dead2, booting := refusingEndpoint(t, 1), refusingEndpoint(t, 2), statusServer(t, http.StatusServiceUnavailable)
	b := newFailoverBundle(t, dead1, dead2, booting.URL)
	_, _, sent, err := b.do(t, http.MethodGet, "/api/overview", "")
	if err == nil || len(sent) != 3 {
		t.Fatalf("GET with every endpoint down = %v, sent to %q; want an error after all three", err, sent)
	}
	for _, want := range []string{"none of the 3 management endpoints answered",
		dead1 + ": dial tcp", dead2 + ": dial tcp", "connection refused",
		booting.URL + ": answered 503 Service Unavailable", "node is booting"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The diagnostics still see a refused dial in it.
	var netErr *net.OpError
	if !errors.As(err, &netErr) || netErr.Op != "dial" {
		t.Errorf("errors.As(%v, *net.OpError) = %v, want the dial error", err, netErr)
	}
}

// A request that reached a server and got no answer is sent again only
// when its method is idempotent; one that reached no server always is.
func TestFailoverSendsAgainOnlyWhatIsSafe(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		method string
		again  bool
	}{
		{http.MethodGet, true}, {http.MethodPut, true}, {http.MethodDelete, true},
		{http.MethodPost, false}, {http.MethodPatch, false},
	} {
		dropping, live := droppingServer(t), echoServer(t)
		b := newFailoverBundle(t, dropping.URL, live.URL)
		status, body, sent, err := b.do(t, c.method, "/api/queues/%2F/q", `{"durable":true}`)
		if c.again {
			if err != nil || status != http.StatusOK || !slices.Equal(sent, []string{dropping.URL, live.URL}) {
				t.Errorf("%s dropped by the first endpoint = %d, %v, sent to %q; want it sent to the second", c.method, status, err, sent)
			} else if want := `body={"durable":true}`; !strings.HasSuffix(body, want) {
				t.Errorf("%s sent again arrived as %q, want the body intact (%s)", c.method, body, want)
			}
			continue
		}
		if err == nil || !slices.Equal(sent, []string{dropping.URL}) || !strings.Contains(err.Error(), "no further") || !strings.Contains(err.Error(), dropping.URL) {
			t.Errorf("%s dropped by the first endpoint = %d, %v, sent to %q; want an error naming it, and nothing sent to the second", c.method, status, err, sent)
		}

		// Refused before anything was written, it goes on.
		b = newFailoverBundle(t, refusingEndpoint(t, 1), live.URL)
		status, body, sent, err = b.do(t, c.method, "/api/queues/%2F/q", `{"durable":true}`)
		if err != nil || status != http.StatusOK || len(sent) != 2 || !strings.HasSuffix(body, `body={"durable":true}`) {
			t.Errorf("%s refused by the first endpoint = %d %q, %v, sent to %q; want it sent to the second, body intact", c.method, status, body, err, sent)
		}
	}
}

// A body that cannot be read again (no GetBody) is not sent again once it
// was sent.
func TestFailoverDoesNotResendABodyItCannotReplay(t *testing.T) {
	t.Parallel()
	dropping, live := droppingServer(t), echoServer(t)
	b := newFailoverBundle(t, dropping.URL, live.URL)
	req, err := http.NewRequest(http.MethodPut, dropping.URL+"/api/queues/%2F/q", io.MultiReader(strings.NewReader("{}")))
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&http.Client{Transport: b.f}).Do(req)
	if err == nil || !strings.Contains(err.Error(), "cannot be read again") || len(b.sent) != 1 {
		t.Fatalf("PUT without GetBody = %v, sent to %q; want an error after the first endpoint", err, b.sent)
	}
}

// Through the management API client the provider uses: a queue declared
// while the first node is down reaches the second with its body intact
// (rabbit-hole builds bodies from bytes, which net/http can replay), and
// each request names the node it was sent to.
func TestBrokerFailsOverEveryManagementCall(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RawPath+" "+string(body))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(live.Close)
	dropping := droppingServer(t)
	b, err := newBroker(dropping.URL+"/,"+live.URL+"/", "alice", "secret", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.declare("/", "jobs", true, map[string]any{"x-max-priority": int64(10)}); err != nil {
		t.Fatalf("declare past a node that dropped the request: %v", err)
	}
	if err := b.deleteQueue("/", "jobs", true); err != nil {
		t.Fatalf("delete: %v", err)
	}
	want := []string{
		`PUT /api/queues/%2F/jobs {"type":"","durable":true,"arguments":{"x-max-priority":10}}`,
		`DELETE /api/queues/%2F/jobs `,
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, want) {
		t.Fatalf("the live node saw %q, want %q", seen, want)
	}
	if b.endpoint != dropping.URL+","+live.URL {
		t.Errorf("endpoint shown as %q", b.endpoint)
	}
}

// The client's endpoint is the first listed; the diagnostics name them all.
func TestBrokerShowsEveryEndpoint(t *testing.T) {
	t.Parallel()
	b, err := newBroker("http://n1:15672/, http://n2:15672", "alice", "secret", nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.client.Endpoint != "http://n1:15672" {
		t.Errorf("client endpoint %q", b.client.Endpoint)
	}
	_, detail := b.brokerDiagnostic("Error", "list the queues", &url.Error{Op: "Get", URL: "http://n1:15672/api/queues", Err: errors.New("it failed")})
	if !strings.Contains(detail, "at http://n1:15672,http://n2:15672") {
		t.Errorf("diagnostic %q does not name both endpoints", detail)
	}
	if got := b.withScheme("http://", "https://"); got != "https://n1:15672,https://n2:15672" {
		t.Errorf("withScheme = %q", got)
	}
	if _, err := newBroker("http://n1:15672,https://n2:15671", "alice", "secret", nil); err == nil || !strings.Contains(err.Error(), "mixes schemes") {
		t.Errorf("newBroker with mixed schemes = %v", err)
	}
}
