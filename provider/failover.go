package provider

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
)

// failover is the management API client's transport when endpoint lists
// several nodes of a cluster: every node serves the whole cluster's API, so
// a request that one node cannot answer can go to the next.
//
// It sends each request to the current endpoint, the last one that
// answered (the first listed, to begin with). When that endpoint gives no
// answer, or answers 502 or 503 (a node that is starting, or whose
// management plugin is down behind a proxy), it sends the request to the
// next endpoint in the list, and so on once round, changing only the
// request's scheme and host (parseEndpoints makes the paths agree). Any
// other answer, 4xx and 500 included, is the cluster's answer and is
// returned as it is: another node would give the same.
//
// What is sent again: a request that failed before it was written in full
// (a refused or timed-out dial, a failed TLS handshake) reached no server,
// and goes to the next endpoint whatever its method. One that failed after
// it was written (a reset or an end of file before the answer, a 502 or
// 503) may have taken effect, and goes to the next endpoint only when its
// method is idempotent. The provider's own writes are: PUT declares a queue
// (declaring it again with the same arguments changes nothing) and DELETE
// deletes one (a second delete answers 404, which the client library
// counts as success); POST, which the management API uses to get or
// publish messages, is never sent twice. A request whose body cannot be
// read again (no GetBody; the client library builds every body from bytes,
// which net/http can replay) is not sent again either.
//
// The request's deadline (requestTimeout) covers every attempt; once it
// has passed, no endpoint is tried.
type failover struct {
	endpoints []*url.URL
	next      http.RoundTripper
	// current is the index in endpoints of the one that answered last.
	current atomic.Int32
}

func newFailover(endpoints []*url.URL, next http.RoundTripper) *failover {
	if next == nil {
		next = http.DefaultTransport
	}
	return &failover{endpoints: endpoints, next: next}
}

func (f *failover) RoundTrip(req *http.Request) (*http.Response, error) {
	first := int(f.current.Load())
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	failed := &endpointsError{total: len(f.endpoints)}
	for i := range f.endpoints {
		k := (first + i) % len(f.endpoints)
		e := f.endpoints[k]
		where := e.Scheme + "://" + e.Host
		var wrote atomic.Bool
		ctx := httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			WroteRequest: func(w httptrace.WroteRequestInfo) {
				if w.Err == nil {
					wrote.Store(true)
				}
			},
		})
		r := req.Clone(ctx)
		r.URL.Scheme, r.URL.Host, r.Host = e.Scheme, e.Host, ""
		if i > 0 && req.Body != nil && req.Body != http.NoBody {
			body, err := req.GetBody()
			if err != nil {
				failed.add(where, fmt.Errorf("reading the request's body again: %w", err))
				return nil, failed.stop("its body could not be read again")
			}
			r.Body = body
		}

		res, err := f.next.RoundTrip(r)
		if err == nil && res.StatusCode != http.StatusBadGateway && res.StatusCode != http.StatusServiceUnavailable {
			f.current.Store(int32(k))
			return res, nil
		}
		if err == nil {
			if !idempotent(req.Method) {
				return res, nil
			}
			err = unavailableError(res)
			wrote.Store(true)
		}
		failed.add(where, err)
		switch {
		case req.Context().Err() != nil:
			return nil, failed.stop("its time ran out")
		case wrote.Load() && !idempotent(req.Method):
			return nil, failed.stop(req.Method + " is not sent again once written, since it may have taken effect")
		case !replayable:
			return nil, failed.stop("its body cannot be read again")
		}
	}
	return nil, failed
}

// idempotent reports whether a request of method may be sent twice with
// the effect of once (RFC 9110, section 9.2.2).
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// unavailableError describes a 502 or 503 answer, with the start of its
// body (RabbitMQ's, or a proxy's, says why), and closes it.
func unavailableError(res *http.Response) error {
	head, _ := io.ReadAll(io.LimitReader(res.Body, 200))
	drain(res)
	msg := strings.Join(strings.Fields(string(head)), " ")
	if msg == "" {
		return fmt.Errorf("answered %s", res.Status)
	}
	return fmt.Errorf("answered %s: %s", res.Status, msg)
}

// endpointsError is the error of a request that no endpoint answered: each
// endpoint tried and its error, in the order tried. It unwraps to every
// one of those errors, so that brokerDiagnostic recognises a refused dial
// or a certificate that did not verify among them.
type endpointsError struct {
	total int
	tried []endpointFailure
	// why the request was not sent to the endpoints left, "" when it was
	// sent to all of them.
	stopped string
}

type endpointFailure struct {
	endpoint string
	err      error
}

func (e *endpointsError) add(endpoint string, err error) {
	e.tried = append(e.tried, endpointFailure{endpoint, err})
}

func (e *endpointsError) stop(why string) *endpointsError {
	if len(e.tried) < e.total {
		e.stopped = why
	}
	return e
}

func (e *endpointsError) Error() string {
	var b strings.Builder
	if e.stopped != "" {
		fmt.Fprintf(&b, "the request went to %d of the %d management endpoints and no further (%s): ", len(e.tried), e.total, e.stopped)
	} else {
		fmt.Fprintf(&b, "none of the %d management endpoints answered: ", e.total)
	}
	for i, f := range e.tried {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %v", f.endpoint, f.err)
	}
	return b.String()
}

func (e *endpointsError) Unwrap() []error {
	errs := make([]error, len(e.tried))
	for i, f := range e.tried {
		errs[i] = f.err
	}
	return errs
}
