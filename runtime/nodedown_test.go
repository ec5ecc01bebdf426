package queuey

import (
	"errors"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestNodeDownReason(t *testing.T) {
	t.Parallel()
	down := []string{
		"NOT_FOUND - home node 'rabbit@n3' of durable queue 'p.q' in vhost '/' is down or inaccessible",
		"NOT_FOUND - queue 'p.q' in vhost '/' process is stopped by supervisor", // 4.0.5, a clean stop
	}
	for _, r := range down {
		err := fmt.Errorf("wrapped: %w", &amqp.Error{Code: amqp.NotFound, Reason: r})
		if got := nodeDownReason(err); got != r {
			t.Errorf("nodeDownReason(%q) = %q, want the reason", r, got)
		}
	}
	for _, err := range []error{
		nil,
		errors.New("home node is down or inaccessible"), // not the broker's
		&amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - no queue 'p.q' in vhost '/'"},
		&amqp.Error{Code: amqp.PreconditionFailed, Reason: "process is stopped by supervisor"},
	} {
		if got := nodeDownReason(err); got != "" {
			t.Errorf("nodeDownReason(%v) = %q, want none", err, got)
		}
	}
	if nodeDownBackoff(0) != nodeDownMinBackoff || nodeDownBackoff(20) != nodeDownMaxBackoff {
		t.Errorf("backoff %v .. %v", nodeDownBackoff(0), nodeDownBackoff(20))
	}
}
