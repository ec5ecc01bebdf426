package queuey

import (
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestConnectErrorNamesTheBrokerNotThePassword pins a gap the fault suite
// found (faults/security_test.go): a refused connection said only
// "connect to RabbitMQ: Exception (403) ...", not which broker, user or vhost
// it was, so a misconfigured deployment could not tell which URL was wrong.
// The password must still appear nowhere.
func TestConnectErrorNamesTheBrokerNotThePassword(t *testing.T) {
	t.Parallel()
	const pw = "s3cret-Zebra-4711"
	refused := &amqp.Error{Code: amqp.AccessRefused, Reason: "username or password not allowed"}
	for url, want := range map[string]string{
		"amqp://app:" + pw + "@rabbit.example:5673/orders": `amqp://app@rabbit.example:5673 (vhost "orders")`,
		"amqps://app:" + pw + "@rabbit.example/":           `amqps://app@rabbit.example:5671 (vhost "/")`,
		"amqp://app:" + pw + "@rabbit.example:notaport/":   "an AMQP URL that does not parse",
	} {
		err := connectError(url, refused)
		if !strings.Contains(err.Error(), want) {
			t.Errorf("connectError(%q) = %q, want it to name %s", url, err, want)
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("connectError(%q) = %q shows the password", url, err)
		}
		if !errors.Is(err, refused) {
			t.Errorf("connectError(%q) does not wrap the cause", url)
		}
	}
}

// TestConnectErrorToATLSPortSaysTLS pins the other half: plain AMQP to a TLS
// listener failed with amqp091-go's "frame size exceeds negotiated
// frame_max", and a client certificate refused under TLS 1.3 with
// "connection reset by peer" or "channel/connection is not open"; none said
// TLS.
func TestConnectErrorToATLSPortSaysTLS(t *testing.T) {
	t.Parallel()
	frame := &amqp.Error{Code: amqp.FrameError, Reason: `Exception (501) Reason: "frame size exceeds negotiated frame_max"`}
	if err := connectError("amqp://guest:guest@127.0.0.1:5671/", frame); !strings.Contains(err.Error(), "amqps://") {
		t.Errorf("plain AMQP to a TLS port: %v", err)
	}
	reset := errors.New("write tcp 127.0.0.1:53112->127.0.0.1:5674: write: connection reset by peer")
	if err := connectError("amqps://guest:guest@localhost:5674/", reset); !strings.Contains(err.Error(), "client certificate") {
		t.Errorf("client certificate refused: %v", err)
	}
	if err := connectError("amqps://guest:guest@localhost:5674/", amqp.ErrClosed); !strings.Contains(err.Error(), "client certificate") {
		t.Errorf("client certificate refused, seen as a closed connection: %v", err)
	}
	if err := connectError("amqp://guest:guest@localhost:5672/", reset); strings.Contains(err.Error(), "certificate") {
		t.Errorf("a reset without TLS blames a certificate: %v", err)
	}
}

// TestConnectErrorToTheManagementPortSaysManagementPort pins issue 15: an
// amqp:// URL pointing at the management port failed after 5 s with
// amqp091-go's bare `Exception (501) Reason: "EOF"`, which names neither
// the port nor the likely mistake.
func TestConnectErrorToTheManagementPortSaysManagementPort(t *testing.T) {
	t.Parallel()
	eof := &amqp.Error{Code: amqp.FrameError, Reason: "EOF"}
	err := connectError("amqp://guest:guest@127.0.0.1:15672/", eof)
	if !strings.Contains(err.Error(), "management port") || !strings.Contains(err.Error(), "5672") || !errors.Is(err, eof) {
		t.Errorf("amqp:// to the management port: %v", err)
	}
	other := &amqp.Error{Code: amqp.FrameError, Reason: `Exception (501) Reason: "frame size exceeds negotiated frame_max"`}
	if err := connectError("amqp://guest:guest@127.0.0.1:5671/", other); strings.Contains(err.Error(), "management") {
		t.Errorf("a TLS port blamed on the management port: %v", err)
	}
}
