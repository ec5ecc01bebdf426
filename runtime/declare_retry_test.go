package queuey

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestHoldDeclarationCutByBrokerShutdownIsRetried pins a bug the fault suite
// found (faults/restart_test.go): a delayed enqueue whose hold-queue
// declaration was in flight when the broker shut down failed with
// CONNECTION_FORCED instead of waiting for the connection like an immediate
// enqueue, because only amqp.ErrClosed counted as a lost connection.
func TestHoldDeclarationCutByBrokerShutdownIsRetried(t *testing.T) {
	t.Parallel()
	forced := &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'", Server: true}
	eof := &amqp.Error{Code: amqp.FrameError, Reason: "EOF"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection forced", declareError("q.deferred.1000", forced), true},
		{"frame error (EOF)", declareError("q.deferred.1000", eof), true},
		{"closed channel", declareError("q.deferred.1000", amqp.ErrClosed), true},
		{"reset socket", declareError("q.deferred.1000", errSocketReset), true},
		{"broken pipe", declareError("q.deferred.1000", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}), true},
		{"precondition failed", declareError("q.deferred.1000", &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl'"}), false},
		{"access refused", declareError("q.deferred.1000", &amqp.Error{Code: amqp.AccessRefused, Reason: "ACCESS_REFUSED"}), false},
		{"other", fmt.Errorf("wrapped: %w", errors.New("boom")), false},
	} {
		if got := lostWithConnection(tc.err); got != tc.want {
			t.Errorf("%s: lostWithConnection(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
