package queuey

// Hold-queue declarations: the declaration channels, and the singleflight
// that lets publishes to one hold queue share a declaration in progress.

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// holdDeclarations is the producer's holdDeclarer: it declares hold queues
// on a pool of declaration channels, and publishes that arrive while a
// declaration of the same queue is in flight share it instead of starting
// another.
type holdDeclarations struct {
	conn    *conn
	closing <-chan struct{}
	// decls are the declaration channels, each used by one declaration
	// at a time; as many as publishing channels, so that held publishes to
	// distinct hold queues declare in parallel rather than queue up
	// behind one channel.
	decls   chan *declChannel
	flights flights // declarations in progress, by hold queue
}

func newHoldDeclarations(c *conn, closing <-chan struct{}, channels int) *holdDeclarations {
	h := &holdDeclarations{conn: c, closing: closing, decls: make(chan *declChannel, channels)}
	for range channels {
		h.decls <- &declChannel{}
	}
	return h
}

func (h *holdDeclarations) declareHold(ctx context.Context, hold, work string, ttlMs int64, durable bool) (time.Time, error) {
	return h.flights.doAt(ctx, hold, func(ctx context.Context) error {
		return h.declare(ctx, hold, durable, topology.HoldArgs(work, ttlMs))
	})
}

// close closes the declaration channels, once no declaration runs.
func (h *holdDeclarations) close() {
	for range cap(h.decls) {
		if dc := <-h.decls; dc.ch != nil {
			_ = dc.ch.Close()
			dc.ch = nil
		}
	}
}

// declChannel is a declaration channel: never a publishing channel, because
// a declaration the broker refuses closes its channel, and must not take
// publishes in flight down with it. It is used by one declaration at a time,
// because amqp091-go would hand a refusal to whichever call on the channel
// happens to read it.
type declChannel struct {
	ch *amqp.Channel
}

// declare declares a queue on a declaration channel of the pool, opening
// (or reopening) the channel as needed.
func (h *holdDeclarations) declare(ctx context.Context, name string, durable bool, args map[string]any) error {
	var dc *declChannel
	select {
	case dc = <-h.decls:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { h.decls <- dc }()
	for try := 0; ; try++ {
		if dc.ch == nil || dc.ch.IsClosed() {
			ch, err := h.conn.channelUntil(ctx, h.closing)
			if err != nil {
				return fmt.Errorf("queuey: declare queue %q: %w", name, err)
			}
			dc.ch = ch
		}
		err := declareQueue(dc.ch, name, durable, args)
		// A channel closed by an earlier refusal or a lost connection
		// was not this declaration's fault: reopen (waiting for the
		// connection to come back) and try once more.
		if err != nil && try == 0 && lostWithConnection(err) {
			dc.ch = nil
			continue
		}
		return err
	}
}
