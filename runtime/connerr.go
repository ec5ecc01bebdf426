package queuey

import (
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// connectError explains a failed dial of url: where to (the URL without its
// password, which must never reach an error or a log), what amqp091-go said,
// and, for the failures whose own words mislead, what they usually mean.
func connectError(url string, err error) error {
	where, scheme := redactURL(url)
	hint := ""
	var ae *amqp.Error
	msg := err.Error()
	switch {
	case scheme == "amqp" && errors.As(err, &ae) && ae.Code == amqp.FrameError && strings.Contains(ae.Reason, "frame_max"):
		// A TLS listener answers the AMQP header with a TLS alert, which
		// amqp091-go reads as an oversized frame.
		hint = " (the port answered with something that is not AMQP: if it is a TLS listener, use amqps://)"
	case scheme == "amqp" && errors.As(err, &ae) && ae.Code == amqp.FrameError && ae.Reason == "EOF":
		// An HTTP server (the management plugin's listener, 15672 by
		// default) reads the AMQP header as a bad request and waits, then
		// hangs up: amqp091-go, waiting for connection.start, reads EOF
		// after its handshake timeout. The provider gives the mirror-image
		// hint for an http:// endpoint that points at the AMQP port.
		hint = " (the port hung up without speaking AMQP: this looks like the management port (HTTP, 15672 by default); the AMQP port is 5672 by default, 5671 for amqps://)"
	case scheme == "amqps" && (errors.Is(err, amqp.ErrClosed) || strings.Contains(msg, "reset by peer") || strings.Contains(msg, "broken pipe") || strings.HasSuffix(msg, "EOF")):
		// With TLS 1.3 the client's handshake is over before the broker
		// checks the client certificate: a refusal arrives as a closed
		// connection, which amqp091-go reports as whichever of a reset,
		// an EOF or amqp.ErrClosed ("channel/connection is not open")
		// it runs into first.
		hint = " (the broker closed the TLS connection, which it does when it refuses the client certificate)"
	}
	return fmt.Errorf("queuey: connect to RabbitMQ at %s: %w%s", where, err, hint)
}

// redactURL renders an AMQP URL without its password, and its scheme.
func redactURL(url string) (string, string) {
	u, err := amqp.ParseURI(url)
	if err != nil {
		// Never echo a URL that did not parse: the password could be
		// anywhere in it.
		return "an AMQP URL that does not parse", ""
	}
	vhost := u.Vhost
	if vhost == "" {
		vhost = "/"
	}
	return fmt.Sprintf("%s://%s@%s:%d (vhost %q)", u.Scheme, u.Username, u.Host, u.Port, vhost), u.Scheme
}
