package queuey

// Diversion, the producer's side: which queues a producer diverts, what it
// last learnt about their divert queues, and how a try picks its routing
// keys. The protocol, the probe and the late-confirm rule are
// internal/divert's; the comment at the top of publish.go says how
// publishes use them.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// divertCache is what the producer last learnt about the divert queue of one
// work or dead-letter queue of its set. Publishes read it with one atomic
// load; a probe replaces the result, never modifies it.
type divertCache struct {
	queue     string // the work or dead-letter queue
	migration string // topology.MigrationName(queue)
	divert    string // topology.DivertName(queue)
	last      atomic.Pointer[divert.Result]
}

func newDivertCache(queue string) *divertCache {
	return &divertCache{queue: queue, migration: topology.MigrationName(queue), divert: topology.DivertName(queue)}
}

// maxProbeRounds bounds how often a publish probes again because the result
// it got was already older than divert.Usable when it read it. Only a broker
// that takes that long to confirm an empty transient message gets there.
const maxProbeRounds = 3

// route sets d.rk, the routing key of this try, for every delivery of send,
// probing divert queues on c as needed, and returns the ones to send now:
// every result they were routed by is still usable. It judges the others:
// a probe lost with its channel twice sends the job again on the next try,
// any other failure fails it.
func (p *Producer) route(ctx context.Context, c confirmer, send []*delivery) []*delivery {
	for round := 1; ; round++ {
		var oldest time.Time // of the results this round routed by
		send, oldest = p.routeOnce(ctx, c, send)
		// Probing one queue of a chunk can outlast another's result.
		if oldest.IsZero() || time.Since(oldest) < divert.Usable {
			return send
		}
		if round == maxProbeRounds {
			kept := send[:0:0]
			for _, d := range send {
				if d.divert == nil {
					kept = append(kept, d)
					continue
				}
				d.fail(fmt.Errorf("queuey: publish to %q: the probes of the divert queues of this batch took longer than %v together, and a publish may not go on an older result", d.key, divert.Usable))
			}
			return kept
		}
	}
}

// routeOnce is one round of route: it returns the deliveries it routed,
// and the sending of the oldest result it routed them by.
func (p *Producer) routeOnce(ctx context.Context, c confirmer, send []*delivery) (routed []*delivery, oldest time.Time) {
	var (
		// The last queue looked up, with its result: a chunk mostly
		// holds messages of one queue.
		dc  *divertCache
		r   *divert.Result
		err error
	)
	routed = keep(send, func(d *delivery) bool {
		if d.divert == nil {
			d.rk = d.key
			return true
		}
		if d.divert != dc {
			dc = d.divert
			r, err = p.divertResult(ctx, c, dc)
		}
		if err != nil {
			d.rk = ""
			if lostWithConnection(err) {
				d.resend(ctx, err)
			} else {
				d.fail(err)
			}
			return false
		}
		d.rk, d.probed = d.key, r.SentAt
		if r.Diverted {
			d.rk = dc.migration
		}
		if oldest.IsZero() || r.SentAt.Before(oldest) {
			oldest = r.SentAt
		}
		return true
	})
	return routed, oldest
}

// divertResult returns a result for dc's divert queue to send a publish by:
// the cached one while it is fresh, else one of a probe this publish waited
// for (its own, on c, or a concurrent publish's to the same queue: they
// share one), as long as it is usable. A publish that gets a result too late
// to use probes again.
func (p *Producer) divertResult(ctx context.Context, c confirmer, dc *divertCache) (*divert.Result, error) {
	for round := 0; ; round++ {
		if r := dc.last.Load(); r.Fresh(time.Now()) || (round > 0 && r.Usable(time.Now())) {
			return r, nil
		}
		if round == maxProbeRounds {
			return nil, fmt.Errorf("queuey: publish to %q: %d probes of its divert queue %q were answered more than %v after they were sent, too late to trust: is the broker overloaded?", dc.queue, maxProbeRounds, dc.divert, divert.Usable)
		}
		err := p.probes.do(ctx, dc.queue, func(ctx context.Context) error { return p.probe(ctx, c, dc) })
		if err != nil && err == ctx.Err() {
			// This publish's own context ended while it waited for
			// another's probe.
			return nil, fmt.Errorf("queuey: publish to %q: waiting for a probe of its divert queue %q: %w", dc.queue, dc.divert, err)
		}
		if err != nil {
			return nil, err
		}
	}
}

// probe learns whether dc's divert queue exists, on c (divert.Probe), and
// stores the result in dc. The probe runs on the channel the publish holds
// a turn on, once it is open, right before the messages go out on it: a
// result is not spent waiting for a free turn or a connection, and a
// publish never holds one turn while it waits for another, which with one
// turn in the pool would deadlock. A probe lost with its channel or
// connection is sent once more, on a channel opened once the connection is
// back.
func (p *Producer) probe(ctx context.Context, c confirmer, dc *divertCache) error {
	for try := 0; ; try++ {
		err := c.open(ctx)
		var r divert.Result
		if err == nil {
			r, err = divert.Probe(ctx, probeSender{c: c, sent: &p.probesSent}, dc.divert)
		}
		if err == nil {
			dc.last.Store(&r)
			return nil
		}
		if busy := (*busyError)(nil); errors.As(err, &busy) {
			// Not a try: the channel had no room for it (busyError).
			select {
			case <-busy.wait:
				try--
				continue
			case <-ctx.Done():
				return fmt.Errorf("queuey: publish to %q: probe for its divert queue %q: waiting for a turn (%v): %w", dc.queue, dc.divert, busy, ctx.Err())
			}
		}
		if try == 0 && lostWithConnection(err) && ctx.Err() == nil {
			continue
		}
		return fmt.Errorf("queuey: publish to %q: probe for its divert queue %q: %w", dc.queue, dc.divert, err)
	}
}

// probeSender sends divert probes through a confirmer, counting them in
// sent: an empty, transient, mandatory message to the divert queue's name.
type probeSender struct {
	c    confirmer
	sent *atomic.Int64
}

func (s probeSender) SendProbe(ctx context.Context, queue string) (divert.Answer, error) {
	f := s.c.publish(ctx, []outbound{{rk: queue}})[0]
	if f.kind != notSent {
		s.sent.Add(1)
	}
	switch f.kind {
	case returned:
		return divert.Returned, nil
	case nacked:
		return divert.Refused, nil
	case acked:
		return divert.Taken, nil
	case lost:
		return 0, amqp.ErrClosed
	default:
		return 0, f.err
	}
}
