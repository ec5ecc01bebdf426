package provider

import (
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

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
)

// declareWorkers bounds how many management API requests one operation has
// in flight: enough to make a set of dozens of queues quick, few enough not
// to queue up behind the management plugin's own request handling.
const declareWorkers = 8

// broker is the provider's view of the management API: the handful of
// operations the queue set needs, with arguments already normalized.
type broker struct {
	endpoint string
	username string
	client   *rabbithole.Client
}

// brokerQueue is one queue as the management API lists it.
type brokerQueue struct {
	Name    string
	Durable bool
	// Type is "classic", "quorum" or "stream"; queuey only uses classic.
	Type string
	// Arguments holds integral JSON numbers as int64, so that they compare
	// equal to what the topology package computes.
	Arguments map[string]any
	// Messages is the management API's count of ready and unacknowledged
	// messages. The API refreshes it every few seconds, so it may lag; a
	// deletion that must not lose messages still asks the broker to refuse
	// it when the queue is not empty.
	Messages int64
}

func newBroker(endpoint, username, password string, transport http.RoundTripper) (*broker, error) {
	c, err := newRabbitClient(endpoint, username, password, transport)
	if err != nil {
		return nil, err
	}
	return &broker{endpoint: strings.TrimRight(endpoint, "/"), username: username, client: c}, nil
}

// errVhostNotFound is returned by listQueues for a virtual host that does
// not exist.
var errVhostNotFound = errors.New("virtual host not found")

// listQueues lists every queue of vhost in one request, keyed by name. One
// request, whatever the size of the set, keeps a refresh cheap on a broker
// with many queues.
func (b *broker) listQueues(vhost string) (map[string]brokerQueue, error) {
	params := url.Values{"columns": {"name,durable,type,arguments,messages"}}
	infos, err := b.client.ListQueuesWithParametersIn(vhost, params)
	if err != nil {
		var resp rabbithole.ErrorResponse
		if errors.As(err, &resp) && resp.StatusCode == http.StatusNotFound {
			return nil, errVhostNotFound
		}
		return nil, err
	}
	out := make(map[string]brokerQueue, len(infos))
	for _, q := range infos {
		out[q.Name] = brokerQueue{
			Name:      q.Name,
			Durable:   q.Durable,
			Type:      q.Type,
			Arguments: normalizeArgs(q.Arguments),
			Messages:  int64(q.Messages),
		}
	}
	return out, nil
}

// getQueue reads one queue; found is false when it does not exist.
func (b *broker) getQueue(vhost, name string) (q brokerQueue, found bool, err error) {
	info, err := b.client.GetQueue(vhost, name)
	if err != nil {
		var resp rabbithole.ErrorResponse
		if errors.As(err, &resp) && resp.StatusCode == http.StatusNotFound {
			return brokerQueue{}, false, nil
		}
		return brokerQueue{}, false, err
	}
	return brokerQueue{
		Name:      info.Name,
		Durable:   info.Durable,
		Type:      info.Type,
		Arguments: normalizeArgs(info.Arguments),
		Messages:  int64(info.Messages),
	}, true, nil
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
	var resp rabbithole.ErrorResponse
	var netErr net.Error
	var urlErr *url.Error
	var certErr *tls.CertificateVerificationError
	var authErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case errors.As(err, &certErr) || errors.As(err, &authErr) || errors.As(err, &hostErr):
		return "Cannot Verify RabbitMQ's Certificate",
			fmt.Sprintf("The provider tried to %s through the management API at %s, and the server's TLS certificate did not verify. "+
				"Set ca_file (or QUEUEY_CA_FILE) to the certificate authority that signed it, or, for testing only, insecure = true.\n\n%s",
				attempted, b.endpoint, err)
	case strings.Contains(err.Error(), "401 Unauthorized"):
		return "RabbitMQ Refused The Credentials",
			fmt.Sprintf("The provider tried to %s through the management API at %s as user %q, and RabbitMQ rejected the username or password. "+
				"Check username and password in the provider configuration (or QUEUEY_USERNAME and QUEUEY_PASSWORD); the user also needs the management tag.\n\n%s",
				attempted, b.endpoint, b.username, err)
	case errors.As(err, &resp) && resp.StatusCode == http.StatusForbidden:
		return "RabbitMQ Denied Access",
			fmt.Sprintf("The provider tried to %s through the management API at %s as user %q, and RabbitMQ denied it. "+
				"Grant the user configure, write and read permissions on the virtual host.\n\n%s", attempted, b.endpoint, b.username, err)
	case errors.As(err, &netErr) || errors.As(err, &urlErr):
		return "Cannot Reach RabbitMQ",
			fmt.Sprintf("The provider tried to %s through the management API at %s and got no answer. "+
				"Check that RabbitMQ is running with the management plugin enabled (rabbitmq-plugins enable rabbitmq_management) "+
				"and that endpoint in the provider configuration (or QUEUEY_ENDPOINT) points at it.\n\n%s", attempted, b.endpoint, err)
	}
	return summary, fmt.Sprintf("The provider tried to %s through the management API at %s, and it failed.\n\n%s", attempted, b.endpoint, err)
}
