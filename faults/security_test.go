//go:build faults

package faults

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// userURL is an AMQP URL of faultsUser with password pw.
func userURL(scheme, hostport, pw, vhost string) string {
	return fmt.Sprintf("%s://%s@%s/%s", scheme, url.UserPassword(faultsUser, pw), hostport, url.PathEscape(vhost))
}

// refusal is one connection the runtime must refuse with a clear error.
type refusal struct {
	name string
	url  string
	tls  *tls.Config
	want []string // substrings of the error, case-insensitive
}

// TestFaultRefusedConnectionsRuntime dials the second node wrongly in every
// way a deployment gets wrong (credentials, vhost, TLS on one side only,
// an unknown CA, a missing or foreign client certificate), through both
// NewProducer and NewWorkerPool. Each must fail promptly with an error that
// says what was refused, and never contain the password it was given.
func TestFaultRefusedConnectionsRuntime(t *testing.T) {
	prefix := uniquePrefix(t, "refused")
	set := jobsSet(prefix)
	wrongPW := "wrong-" + faultsPassword[:8] + "-pw"
	good := clientTLS(t)
	noCert := good.Clone()
	noCert.Certificates = nil
	rogue := good.Clone()
	rc, err := tls.LoadX509KeyPair(certFile("rogue-client.pem"), certFile("rogue-client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	rogue.Certificates = []tls.Certificate{rc}
	systemRoots := good.Clone()
	systemRoots.RootCAs = nil

	cases := []refusal{
		{"wrong password", userURL("amqp", nodeAMQP, wrongPW, "/"), nil, []string{"username or password not allowed"}},
		{"unknown user", "amqp://nobody:" + wrongPW + "@" + nodeAMQP + "/", nil, []string{"username or password not allowed"}},
		{"unknown vhost", userURL("amqp", nodeAMQP, faultsPassword, "no-such-vhost"), nil, []string{"vhost"}},
		{"amqps to the plain port", userURL("amqps", nodeAMQP, faultsPassword, "/"), good, []string{"tls"}},
		{"amqp to the TLS port", userURL("amqp", nodeAMQPS, faultsPassword, "/"), nil, nil},
		{"server CA not trusted", userURL("amqps", "localhost:5674", faultsPassword, "/"), systemRoots, []string{"certificate"}},
		{"no client certificate", userURL("amqps", "localhost:5674", faultsPassword, "/"), noCert, []string{"certificate"}},
		{"client certificate from another CA", userURL("amqps", "localhost:5674", faultsPassword, "/"), rogue, []string{"certificate"}},
		{"nothing listening", userURL("amqp", "127.0.0.1:1", faultsPassword, "/"), nil, []string{"connection refused"}},
	}
	ws := queuey.NewWorkers()
	l := newLedger()
	queuey.AddWorker(ws, l.worker())
	var notes []string
	var slowest time.Duration
	began := time.Now()
	for _, tc := range cases {
		for _, via := range []string{"NewProducer", "NewWorkerPool"} {
			var logs logBuffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			cfg := &amqp.Config{TLSClientConfig: tc.tls, Dial: amqp.DefaultDial(10 * time.Second)}
			start := time.Now()
			if via == "NewProducer" {
				p, err := queuey.NewProducer(ctx, tc.url, set, &queuey.ProducerOptions{AMQPConfig: cfg, Logger: logger(&logs)})
				if p != nil {
					_ = p.Close()
				}
				err = checkRefusal(t, tc, via, err, &logs, wrongPW)
				if via == "NewProducer" && err != nil {
					notes = append(notes, fmt.Sprintf("%s: %q", tc.name, err.Error()))
				}
			} else {
				pool, err := queuey.NewWorkerPool(ctx, tc.url, set, ws, &queuey.WorkerOptions{AMQPConfig: cfg, Logger: logger(&logs)})
				if pool != nil {
					_ = pool.Stop(ctx)
				}
				_ = checkRefusal(t, tc, via, err, &logs, wrongPW)
			}
			cancel()
			d := time.Since(start)
			slowest = max(slowest, d)
			t.Logf("%s via %s failed after %s", tc.name, via, d.Round(time.Millisecond))
			if d > 15*time.Second {
				t.Errorf("%s via %s took %s to fail", tc.name, via, d.Round(time.Millisecond))
			}
		}
	}
	record(t, row{
		Fault: "refused connections in the runtime: wrong credentials, unknown vhost, TLS mismatch",
		Load:  fmt.Sprintf("%d misconfigurations × NewProducer and NewWorkerPool", len(cases)),
		Took:  time.Since(began),
		Note: fmt.Sprintf("each failed within %s, naming the broker, user and vhost and the refusal, with no password in the error or the log (NewProducer's errors): %s",
			slowest.Round(100*time.Millisecond), strings.ReplaceAll(strings.Join(notes, "; "), "|", "/")),
	})
}

// checkRefusal fails the test unless err is a clear refusal free of any
// password; it returns err.
func checkRefusal(t *testing.T, tc refusal, via string, err error, logs *logBuffer, wrongPW string) error {
	t.Helper()
	if err == nil {
		t.Errorf("%s via %s: connected", tc.name, via)
		return nil
	}
	msg := err.Error()
	t.Logf("%s via %s: %v", tc.name, via, err)
	for _, w := range tc.want {
		if !strings.Contains(strings.ToLower(msg), strings.ToLower(w)) {
			t.Errorf("%s via %s: the error does not say %q: %v", tc.name, via, w, err)
		}
	}
	for _, pw := range []string{faultsPassword, wrongPW} {
		if strings.Contains(msg, pw) || strings.Contains(logs.String(), pw) {
			t.Errorf("%s via %s: a password appears in the error or the log", tc.name, via)
		}
	}
	return err
}

// TestFaultTLSClientCertificates runs 2,000 jobs over amqps against the
// listener that requires a client certificate, producer and pool both
// presenting the one the node's CA signed, with the broker closing every
// connection twice on the way: TLS reconnects like plain AMQP.
func TestFaultTLSClientCertificates(t *testing.T) {
	const jobs = 2_000
	prefix := uniquePrefix(t, "tls")
	set := jobsSet(prefix)
	var logs logBuffer
	l := newLedger()
	uri := userURL("amqps", "localhost:5674", faultsPassword, "/")
	cfg := &amqp.Config{TLSClientConfig: clientTLS(t)}
	prod := newProducer(t, uri, set, &queuey.ProducerOptions{AMQPConfig: cfg, Logger: logger(&logs)})
	startPool(t, uri, set, l, &queuey.WorkerOptions{AMQPConfig: cfg, Logger: quiet(&logs)})

	// The broker's view: every connection of this test is TLS, with the
	// client certificate's subject.
	conns, err := mgmt(t).ListConnections()
	if err == nil {
		for _, c := range conns {
			if c.Port == 5674 && !c.UsesTLS {
				t.Errorf("connection %s on the TLS port does not use TLS", c.Name)
			}
		}
	}
	began := time.Now()
	closures := 0
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for seq := range jobs {
		if seq == jobs/3 || seq == 2*jobs/3 {
			closures += closeAllConnections(t)
		}
		var err error
		if seq%10 == 0 {
			_, err = queuey.EnqueueJobAfter(ctx, prod, faultJob{Seq: seq}, time.Second, nil)
		} else {
			_, err = queuey.EnqueueJob(ctx, prod, faultJob{Seq: seq}, nil)
		}
		l.enqueued(seq, err)
	}
	if !within(2*time.Minute, l.allHandled) {
		t.Errorf("not every confirmed job was handled within 2 min")
	}
	if strings.Contains(logs.String(), faultsPassword) {
		t.Errorf("the password appears in the log")
	}
	record(t, l.row("TLS (amqps) with CA and client certificate, connections closed twice",
		fmt.Sprintf("%d jobs (10%% delayed 1 s), 1 producer, 1 pool, over amqps with verify_peer and fail_if_no_peer_cert", jobs),
		time.Since(began), fmt.Sprintf("%d TLS connections closed by the broker and re-established; %d enqueue errors", closures, jobs-len(l.confirmed))))
}

// TestFaultNoPasswordInLogsOrErrors runs a producer and a pool as a user
// with a generated password, logging at debug level, through everything
// that logs or returns a connection error: the broker closing the
// connections while the password has been changed (so that every reconnect
// is refused and logged), the password restored, jobs handled again, and a
// dial with a wrong password. Neither password may appear in any log record
// or error string.
func TestFaultNoPasswordInLogsOrErrors(t *testing.T) {
	const jobs = 300
	prefix := uniquePrefix(t, "secret")
	set := jobsSet(prefix)
	var logs logBuffer
	l := newLedger()
	uri := userURL("amqp", nodeAMQP, faultsPassword, "/")
	prod := newProducer(t, uri, set, &queuey.ProducerOptions{Logger: logger(&logs)})
	startPool(t, uri, set, l, &queuey.WorkerOptions{Logger: logger(&logs)})
	interim := "interim-" + faultsPassword[len(faultsPassword)-8:] + "-pw"
	restored := false
	restore := func() {
		if !restored {
			ctl(t, "-q", "change_password", faultsUser, faultsPassword)
			restored = true
		}
	}
	t.Cleanup(restore)

	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var errs []string
	enqueue := func(from, to int) {
		for seq := from; seq < to; seq++ {
			_, err := queuey.EnqueueJob(ctx, prod, faultJob{Seq: seq}, nil)
			l.enqueued(seq, err)
			if err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	enqueue(0, jobs/3)
	ctl(t, "-q", "change_password", faultsUser, interim)
	closeAllConnections(t)
	// Reconnects fail (and log) while the password is changed, and a
	// publish that waits for the connection meanwhile gives up with an
	// error of its own.
	short, shortCancel := context.WithTimeout(ctx, 3*time.Second)
	if _, err := queuey.EnqueueJob(short, prod, faultJob{Seq: jobs}, nil); err != nil {
		errs = append(errs, err.Error())
	}
	shortCancel()
	within(10*time.Second, func() bool { return strings.Contains(logs.String(), "reconnect failed") })
	restore()
	enqueue(jobs/3, jobs)
	if !within(2*time.Minute, l.allHandled) {
		t.Errorf("not every confirmed job was handled within 2 min")
	}
	// A wrong password at start-up.
	_, err := queuey.NewProducer(ctx, userURL("amqp", nodeAMQP, interim, "/"), set, &queuey.ProducerOptions{Logger: logger(&logs)})
	if err == nil {
		t.Errorf("a producer with the wrong password connected")
	} else {
		errs = append(errs, err.Error())
	}

	text := logs.String() + "\n" + strings.Join(errs, "\n")
	for _, pw := range []string{faultsPassword, interim, url.QueryEscape(faultsPassword)} {
		if strings.Contains(text, pw) {
			i := strings.Index(text, pw)
			t.Errorf("a password appears in the logs or errors: …%s…", text[max(0, i-80):i])
		}
	}
	refusedLogged := strings.Count(logs.String(), "reconnect failed")
	if refusedLogged == 0 {
		t.Errorf("no reconnect was refused while the password was changed; the test did not exercise the error path")
	}
	r := l.row("no password in logs or errors",
		fmt.Sprintf("%d jobs as user %s, debug-level slog captured; broker closed connections while the password was changed", jobs, faultsUser),
		time.Since(began),
		fmt.Sprintf("%d log lines (%d refused reconnects) and %d error strings searched for the password, the interim password and its URL-escaped form: none found",
			strings.Count(logs.String(), "\n"), refusedLogged, len(errs)))
	r.Published++ // the publish that gave up while the password was changed
	record(t, r)
}
