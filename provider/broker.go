package provider

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// declareWorkers bounds how many management API requests one operation has
// in flight: enough to make a set of dozens of queues quick, few enough not
// to queue up behind the management plugin's own request handling.
const declareWorkers = 8

// broker is the provider's view of the management API: the handful of
// operations the queue set needs, with arguments already normalized.
type broker struct {
	// endpoint is the endpoint setting as the diagnostics show it: the
	// URLs of endpoints without a trailing slash, separated by commas.
	endpoint  string
	endpoints []string
	username  string
	// clientCert says whether the transport presents a client certificate,
	// which changes what a refused TLS handshake asks the user to do.
	clientCert bool
	client     *rabbithole.Client

	// mu guards transient, what transientPolicy found per vhost.
	mu        sync.Mutex
	transient map[string]transientAnswer
}

// sameCluster checks that ac, dialled at amqpURL for a migration, reaches
// the cluster the management API manages. Both name it (the AMQP server
// property cluster_name, the API's /api/cluster-name); a provider whose
// amqp_url points elsewhere (the default is the endpoint's host on 5672)
// would otherwise move messages of a queue of the same name on another
// broker while it redeclares nothing on this one.
func (b *broker) sameCluster(ac *amqp.Connection, amqpURL string) error {
	cn, err := b.client.GetClusterName()
	if err != nil {
		return fmt.Errorf("read the management API's cluster name, to check that amqp_url reaches the same broker: %w", err)
	}
	viaAMQP, _ := ac.Properties["cluster_name"].(string)
	if viaAMQP == "" || cn.Name == "" || viaAMQP == cn.Name {
		return nil
	}
	return fmt.Errorf("amqp_url %s reaches RabbitMQ cluster %q, but endpoint %s manages cluster %q: a migration would move the messages of a queue of that name on the other broker. "+
		"Nothing was changed. Set amqp_url (or QUEUEY_AMQP_URL) to the AMQP listener of the endpoint's broker",
		redactURL(amqpURL), viaAMQP, b.endpoint, cn.Name)
}

// brokerQueue is one queue as the management API lists it.
type brokerQueue struct {
	Name string
	// Consumers is the number of consumers; read only by listQueueStats.
	Consumers int64
	Durable   bool
	// Type is "classic", "quorum" or "stream"; queuey only uses classic.
	Type string
	// Arguments holds integral JSON numbers as int64, so that they compare
	// equal to what the topology package computes, and leaves out the
	// x-queue-type "classic" RabbitMQ 4 reports (topology.WithoutDefaults).
	Arguments map[string]any
	// Messages is the management API's count of ready and unacknowledged
	// messages. The API refreshes it every few seconds, so it may lag; a
	// deletion that must not lose messages still asks the broker to refuse
	// it when the queue is not empty.
	Messages int64
}

// newBroker builds the broker behind endpoint, one management API URL or
// several separated by commas (parseEndpoints), among which every request
// fails over (failover). transport nil means http.DefaultTransport, which
// presents no client certificate. Its TLS settings are not read: the
// shared transport writes them on its first request (or Clone) in any
// goroutine, so reading them races with that.
func newBroker(endpoint, username, password string, transport http.RoundTripper) (*broker, error) {
	clientCert := false
	if transport == nil {
		transport = http.DefaultTransport
	} else if t, ok := transport.(*http.Transport); ok && t.TLSClientConfig != nil {
		clientCert = len(t.TLSClientConfig.Certificates) > 0
	}
	endpoints := []string{strings.TrimRight(endpoint, "/")}
	if strings.Contains(endpoint, ",") {
		urls, problem := parseEndpoints(endpoint)
		if problem != "" {
			return nil, errors.New(problem)
		}
		endpoints = make([]string, len(urls))
		for i, u := range urls {
			endpoints[i] = strings.TrimRight(u.String(), "/")
		}
		// The client's own endpoint is the first; failover rewrites
		// each request's host from there.
		endpoint, transport = endpoints[0], newFailover(urls, transport)
	}
	c, err := newRabbitClient(endpoint, username, password, plainHTTPCheck{next: transport})
	if err != nil {
		return nil, err
	}
	return &broker{endpoint: strings.Join(endpoints, ","), endpoints: endpoints, username: username, clientCert: clientCert, client: c}, nil
}

// withScheme is the endpoint setting with every URL's scheme from (such
// as "http://") replaced by to, for a diagnostic that suggests it.
func (b *broker) withScheme(from, to string) string {
	out := make([]string, len(b.endpoints))
	for i, e := range b.endpoints {
		out[i] = to + strings.TrimPrefix(e, from)
	}
	return strings.Join(out, ",")
}

// errPlainHTTPToTLS marks a plain HTTP request that the server refused
// because the port expects TLS.
var errPlainHTTPToTLS = errors.New("the server expects TLS on this port")

// plainHTTPCheck wraps the management API client's transport to recognise
// the 400 answer an HTTPS server (Go's, nginx's) gives a plain HTTP
// request, and return errPlainHTTPToTLS instead: the client library reads
// the body of an error as JSON and drops it, and the body's text is the
// only sign of what went wrong. RabbitMQ's own TLS listener answers with a
// TLS alert instead, which brokerDiagnostic recognises in the error.
type plainHTTPCheck struct {
	next http.RoundTripper
}

func (t plainHTTPCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if err != nil || req.URL.Scheme != "http" || res.StatusCode != http.StatusBadRequest || res.Body == nil {
		return res, err
	}
	head := make([]byte, 256)
	n, _ := io.ReadFull(res.Body, head)
	head = head[:n]
	for _, says := range []string{"HTTP request to an HTTPS server", "plain HTTP request was sent to HTTPS port"} {
		if bytes.Contains(head, []byte(says)) {
			drain(res)
			return nil, fmt.Errorf("%w (it answered %s: %q)", errPlainHTTPToTLS, res.Status, strings.TrimSpace(string(head)))
		}
	}
	res.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), res.Body), res.Body}
	return res, nil
}

// errVhostNotFound is returned by listQueues for a virtual host that does
// not exist.
var errVhostNotFound = errors.New("virtual host not found")

// listQueues lists every queue of vhost in one request, keyed by name. One
// request, whatever the size of the set, keeps a refresh cheap on a broker
// with many queues.
func (b *broker) listQueues(vhost string) (map[string]brokerQueue, error) {
	infos, err := b.client.ListQueuesWithParametersIn(vhost, queueColumns)
	if err != nil {
		var resp rabbithole.ErrorResponse
		if errors.As(err, &resp) && resp.StatusCode == http.StatusNotFound {
			return nil, errVhostNotFound
		}
		return nil, err
	}
	out := make(map[string]brokerQueue, len(infos))
	for _, q := range infos {
		out[q.Name] = fromInfo(q)
	}
	return out, nil
}

// listQueueStats is listQueues with each queue's consumer count too, for
// the data source.
func (b *broker) listQueueStats(vhost string) (map[string]brokerQueue, error) {
	infos, err := b.client.ListQueuesWithParametersIn(vhost, statColumns)
	if err != nil {
		var resp rabbithole.ErrorResponse
		if errors.As(err, &resp) && resp.StatusCode == http.StatusNotFound {
			return nil, errVhostNotFound
		}
		return nil, err
	}
	out := make(map[string]brokerQueue, len(infos))
	for _, q := range infos {
		out[q.Name] = fromInfo(q)
	}
	return out, nil
}

// statColumns are queueColumns and the consumer count.
var statColumns = url.Values{"columns": {"name,durable,type,arguments,messages,consumers"}}

// queueColumns are the fields the provider reads of a queue. Asking for
// just these keeps answers small, and leaves out consumer_details, which
// RabbitMQ writes in a shape rabbit-hole cannot decode (channel_details
// [] instead of an object) while a consumer's channel is closing: a read
// of a queue whose workers reconnect would fail.
var queueColumns = url.Values{"columns": {"name,durable,type,arguments,messages"}}

func fromInfo(q rabbithole.QueueInfo) brokerQueue {
	return brokerQueue{
		Name:      q.Name,
		Durable:   q.Durable,
		Type:      q.Type,
		Arguments: topology.WithoutDefaults(normalizeArgs(q.Arguments)),
		Messages:  int64(q.Messages),
		Consumers: int64(q.Consumers),
	}
}

// getQueue reads one queue; found is false when it does not exist.
func (b *broker) getQueue(vhost, name string) (q brokerQueue, found bool, err error) {
	info, err := b.client.GetQueueWithParameters(vhost, name, queueColumns)
	if err != nil {
		var resp rabbithole.ErrorResponse
		if errors.As(err, &resp) && resp.StatusCode == http.StatusNotFound {
			return brokerQueue{}, false, nil
		}
		return brokerQueue{}, false, err
	}
	return fromInfo(rabbithole.QueueInfo(*info)), true, nil
}

// errInequivalent marks a declaration the broker refused because the queue
// exists with other arguments or durability.
var errInequivalent = errors.New("queue exists with other arguments")

// declare declares a classic queue. Declaring a queue that exists with the
// same arguments does nothing, which is what makes Create and Update safe to
// repeat after a failure.
func (b *broker) declare(vhost, name string, durable bool, args map[string]any) error {
	res, err := b.client.DeclareQueue(vhost, name, rabbithole.QueueSettings{Durable: durable, Arguments: args})
	if err != nil {
		var resp rabbithole.ErrorResponse
		if errors.As(err, &resp) && resp.StatusCode == http.StatusBadRequest && strings.Contains(resp.Reason, "inequivalent") {
			return fmt.Errorf("%w: %s", errInequivalent, resp.Reason)
		}
		return err
	}
	drain(res)
	return nil
}

// errNotEmpty marks a deletion the broker refused because the queue still
// holds messages.
var errNotEmpty = errors.New("queue is not empty")

// deleteQueue deletes a queue; with ifEmpty the broker itself refuses when
// the queue holds messages, which is the guard against a message count that
// lagged. Deleting a queue that does not exist succeeds.
func (b *broker) deleteQueue(vhost, name string, ifEmpty bool) error {
	res, err := b.client.DeleteQueue(vhost, name, rabbithole.QueueDeleteOptions{IfEmpty: ifEmpty})
	if err != nil {
		var resp rabbithole.ErrorResponse
		if errors.As(err, &resp) && resp.StatusCode == http.StatusBadRequest && strings.Contains(resp.Reason, "not empty") {
			return fmt.Errorf("%w: %s", errNotEmpty, resp.Reason)
		}
		return err
	}
	drain(res)
	return nil
}

func drain(res *http.Response) {
	if res != nil && res.Body != nil {
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
}

// normalizeArgs turns the float64 that encoding/json gives every JSON number
// into int64 when it is integral, as the topology package computes them.
func normalizeArgs(in map[string]any) map[string]any {
	out := make(map[string]any, len(in))
	for k, v := range in {
		if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			out[k] = int64(f)
			continue
		}
		out[k] = v
	}
	return out
}

// runAll runs tasks with at most workers at a time and returns their errors
// in task order, nil where a task succeeded. It does not stop at the first
// failure: every queue that can be declared is, so that the state written
// afterwards matches the broker.
func runAll(ctx context.Context, workers int, tasks []func() error) []error {
	errs := make([]error, len(tasks))
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for i, task := range tasks {
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = task()
		}()
	}
	wg.Wait()
	return errs
}

// brokerDiagnostic turns a failed management API request into a diagnostic
// summary and detail. attempted says what the provider was doing, in words a
// Terraform user knows ("list the queues of virtual host \"/\"").
func (b *broker) brokerDiagnostic(summary, attempted string, err error) (string, string) {
	tried := fmt.Sprintf("The provider tried to %s through the management API at %s", attempted, b.endpoint)
	var resp rabbithole.ErrorResponse
	var netErr net.Error
	var urlErr *url.Error
	var certErr *tls.CertificateVerificationError
	var authErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	alert, alerted := remoteTLSAlert(err)
	switch {
	case errors.As(err, &certErr) || errors.As(err, &authErr) || errors.As(err, &hostErr):
		return "Cannot Verify RabbitMQ's Certificate",
			fmt.Sprintf("%s, and the server's TLS certificate did not verify. "+
				"Set ca_file (or QUEUEY_CA_FILE) to the certificate authority that signed it, or, for testing only, insecure = true.\n\n%s",
				tried, err)
	case errors.Is(err, errPlainHTTPToTLS) || answeredWith(err, `\x15\x03`, `\x16\x03`):
		return "RabbitMQ Endpoint Expects HTTPS",
			fmt.Sprintf("%s, and the server answered in TLS: the endpoint uses http:// but the port speaks TLS. "+
				"Write endpoint (or QUEUEY_ENDPOINT) with https://, such as %s, and set ca_file unless an authority the system trusts signed the broker's certificate.\n\n%s",
				tried, b.withScheme("http://", "https://"), err)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "RabbitMQ Endpoint Does Not Speak HTTPS",
			fmt.Sprintf("%s, and the server answered in plain HTTP: the endpoint uses https:// but the port does not speak TLS. "+
				"Write endpoint (or QUEUEY_ENDPOINT) with http://, such as %s, or point it at the broker's HTTPS listener (management.ssl.port, 15671 by default).\n\n%s",
				tried, b.withScheme("https://", "http://"), err)
	case answeredWith(err, "AMQP"):
		return "RabbitMQ Endpoint Is The AMQP Port",
			fmt.Sprintf("%s, and the server answered in AMQP: the endpoint points at the broker's AMQP listener, not at its management API. "+
				"Point endpoint (or QUEUEY_ENDPOINT) at the management API, port 15672 by default (15671 over HTTPS); the AMQP address belongs in amqp_url.\n\n%s",
				tried, err)
	case alerted && clientCertAlerts[alert]:
		return "RabbitMQ Refused The Client Certificate", fmt.Sprintf("%s, and the server ended the TLS handshake with %q. %s%s\n\n%s",
			tried, alert, b.clientCertAdvice(), handshakeFailureAdvice(alert), err)
	case alerted:
		return "RabbitMQ Refused The TLS Connection",
			fmt.Sprintf("%s, and the server ended the TLS handshake with %q. "+
				"Check that the broker's management.ssl settings (versions, ciphers) accept a client that speaks TLS 1.2 or 1.3.\n\n%s",
				tried, alert, err)
	case strings.HasPrefix(b.endpoint, "https://") && closedAfterDial(err):
		// Under TLS 1.3 the client's handshake is over before the server
		// checks the client's certificate, so a refusal may reach the
		// client as a closed connection rather than as an alert.
		return "RabbitMQ Closed The TLS Connection",
			fmt.Sprintf("%s, and the server closed the connection without an answer. "+
				"A broker that requires a client certificate does this when it refuses one or finds none. %s "+
				"If instead the broker was restarting, apply again.\n\n%s",
				tried, b.clientCertAdvice(), err)
	case strings.Contains(err.Error(), "401 Unauthorized"):
		return "RabbitMQ Refused The Credentials",
			fmt.Sprintf("%s as user %q, and RabbitMQ rejected the username or password. "+
				"Check username and password in the provider configuration (or QUEUEY_USERNAME and QUEUEY_PASSWORD); the user also needs the management tag.\n\n%s",
				tried, b.username, err)
	case errors.As(err, &resp) && resp.StatusCode == http.StatusForbidden:
		return "RabbitMQ Denied Access",
			fmt.Sprintf("%s as user %q, and RabbitMQ denied it. "+
				"Grant the user configure, write and read permissions on the virtual host.\n\n%s", tried, b.username, err)
	case errors.As(err, &netErr) || errors.As(err, &urlErr):
		return "Cannot Reach RabbitMQ",
			fmt.Sprintf("%s and got no answer. "+
				"Check that RabbitMQ is running with the management plugin enabled (rabbitmq-plugins enable rabbitmq_management) "+
				"and that endpoint in the provider configuration (or QUEUEY_ENDPOINT) points at it.\n\n%s", tried, err)
	}
	return summary, fmt.Sprintf("%s, and it failed.\n\n%s", tried, err)
}

// clientCertAlerts are the TLS alerts, as crypto/tls names them, with which
// a server refuses a client certificate or the lack of one. A handshake
// failure is what RabbitMQ sends under TLS 1.2 for a missing certificate;
// it can also mean that the two sides share no cipher suite.
var clientCertAlerts = map[string]bool{
	"tls: certificate required":          true,
	"tls: bad certificate":               true,
	"tls: unsupported certificate":       true,
	"tls: revoked certificate":           true,
	"tls: expired certificate":           true,
	"tls: unknown certificate":           true,
	"tls: unknown certificate authority": true,
	"tls: access denied":                 true,
	"tls: handshake failure":             true,
}

// clientCertAdvice says what to check when the broker refused the client
// certificate, or its absence.
func (b *broker) clientCertAdvice() string {
	if !b.clientCert {
		return "The provider presented no client certificate, since none is configured. " +
			"If the broker requires one, set client_cert_file and client_key_file (or QUEUEY_CLIENT_CERT_FILE and QUEUEY_CLIENT_KEY_FILE) to a certificate and key signed by an authority the broker trusts (its management.ssl.cacertfile); " +
			"if it should not, check its management.ssl.verify and management.ssl.fail_if_no_peer_cert."
	}
	return "The provider presents the certificate in client_cert_file only when an authority the broker names (its management.ssl.cacertfile) signed it, so the broker may have refused it or not got it. " +
		"Check that client_cert_file and client_key_file (or QUEUEY_CLIENT_CERT_FILE and QUEUEY_CLIENT_KEY_FILE) hold a certificate and its key, signed by such an authority, current, and made for client authentication; " +
		"and check the broker's management.ssl.verify and management.ssl.fail_if_no_peer_cert."
}

func handshakeFailureAdvice(alert string) string {
	if alert != "tls: handshake failure" {
		return ""
	}
	return " A handshake failure can also mean that the two sides share no TLS version or cipher suite: check the broker's management.ssl.versions and management.ssl.ciphers."
}

// remoteTLSAlert returns the alert with which the server ended a TLS
// connection, as crypto/tls writes it ("tls: certificate required").
// crypto/tls does not export the alert type; the error that carries it is
// a *net.OpError whose Op is "remote error".
func remoteTLSAlert(err error) (string, bool) {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" && op.Err != nil {
		return op.Err.Error(), true
	}
	return "", false
}

// answeredWith reports whether the server answered an HTTP request with
// bytes that are not HTTP and begin with one of prefixes, as net/http
// quotes them: "\x15\x03" is a TLS alert record, which RabbitMQ's TLS
// listener sends to a plain HTTP request, "\x16\x03" a TLS handshake
// record, "AMQP" the protocol header of an AMQP listener.
func answeredWith(err error, prefixes ...string) bool {
	msg := err.Error()
	for _, p := range prefixes {
		if strings.Contains(msg, `malformed HTTP response "`+p) {
			return true
		}
	}
	return false
}

// closedAfterDial reports whether the server closed a connection it had
// accepted before answering: a reset, a broken pipe or an end of file, not
// a failed dial or a timeout.
func closedAfterDial(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// redactURL is u without its password, for an error message.
func redactURL(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return "(an unreadable URL)"
	}
	return parsed.Redacted()
}
