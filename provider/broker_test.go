package provider

import (
	"context"
	"errors"
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
