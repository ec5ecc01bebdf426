package queuey

// Diversion: how a producer keeps publishing to a work queue while a
// migration deletes and redeclares it. topology.DivertName states the
// protocol; the comment at the top of publish.go says how publishes use it.

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// divertCache is what the producer last learnt about the divert queue of one
// work queue of its set. Publishes read it with one atomic load; a probe
// replaces the result, never modifies it.
type divertCache struct {
	work      string // the work queue
	migration string // topology.MigrationName(work)
	divert    string // topology.DivertName(work)
	last      atomic.Pointer[probeResult]
}

func newDivertCache(work string) *divertCache {
	return &divertCache{work: work, migration: topology.MigrationName(work), divert: topology.DivertName(work)}
}

// probeResult is the outcome of one probe of a divert queue.
type probeResult struct {
	// sentAt is when the probe was sent, with its monotonic reading: the
	// result is trusted for divert.Recheck from then, not from
	// when the broker answered.
	sentAt   time.Time
	diverted bool
}

// fresh reports whether r may still be reused, by a publish that did not
// wait for its probe.
func (r *probeResult) fresh() bool {
	return r != nil && time.Since(r.sentAt) < divert.Recheck
}

// usable reports whether a publish may still be sent by r: a probe answered
// later than DivertRecheck (a busy broker) is not probed again at once.
func (r *probeResult) usable() bool {
	return r != nil && time.Since(r.sentAt) < divert.Usable
}

// maxProbeRounds bounds how often a publish probes again because the result
// it got was already older than DivertUsable when it read it. Only a broker
// that takes that long to confirm an empty transient message gets there.
const maxProbeRounds = 3

// route sets out[i].rk, the routing key of this try, for every i in pending,
// probing divert queues on pc as needed. It returns the messages to send now
// (every result they were routed by still fresh), and, of the others, the
// ones worth another try: those whose probe was lost with its channel twice.
// It sets errs[i] for every message it does not return in send.
func (p *Producer) route(ctx context.Context, pc *pubChannel, out []outgoing, pending []int, errs []error) (send, retry []int) {
	send = pending
	for round := 1; ; round++ {
		var (
			oldest time.Time // of the results this round routed by
			failed bool
			// The last queue looked up, with its result: a chunk
			// mostly holds messages of one queue.
			c   *divertCache
			r   *probeResult
			err error
		)
		for _, i := range send {
			o := &out[i]
			if o.divert == nil {
				o.rk = o.key
				continue
			}
			if o.divert != c {
				c = o.divert
				r, err = p.divertResult(ctx, pc, c)
			}
			if err != nil {
				o.rk, errs[i], failed = "", err, true
				if lostWithConnection(err) && ctx.Err() == nil {
					retry = append(retry, i)
				}
				continue
			}
			o.rk, o.probed = o.key, r.sentAt
			if r.diverted {
				o.rk = c.migration
			}
			if oldest.IsZero() || r.sentAt.Before(oldest) {
				oldest = r.sentAt
			}
		}
		if failed {
			kept := make([]int, 0, len(send))
			for _, i := range send {
				if out[i].divert == nil || out[i].rk != "" {
					kept = append(kept, i)
				}
			}
			send = kept
		}
		// Probing one queue of a chunk can outlast another's result.
		if oldest.IsZero() || time.Since(oldest) < divert.Usable {
			return send, retry
		}
		if round == maxProbeRounds {
			for _, i := range send {
				if o := &out[i]; o.divert != nil {
					errs[i] = fmt.Errorf("queuey: publish to %q: the probes of the divert queues of this batch took longer than %v together, and a publish may not go on an older result", o.key, divert.Usable)
				}
			}
			kept := send[:0:0]
			for _, i := range send {
				if out[i].divert == nil {
					kept = append(kept, i)
				}
			}
			return kept, retry
		}
	}
}

// divertResult returns a result for c's divert queue to send a publish by:
// the cached one while it is fresh, else one of a probe this publish waited
// for (its own, on pc, or a concurrent publish's to the same queue: they
// share one), as long as it is usable. A publish that gets a result too late
// to use probes again.
func (p *Producer) divertResult(ctx context.Context, pc *pubChannel, c *divertCache) (*probeResult, error) {
	for round := 0; ; round++ {
		if r := c.last.Load(); r.fresh() || (round > 0 && r.usable()) {
			return r, nil
		}
		if round == maxProbeRounds {
			return nil, fmt.Errorf("queuey: publish to %q: %d probes of its divert queue %q were answered more than %v after they were sent, too late to trust: is the broker overloaded?", c.work, maxProbeRounds, c.divert, divert.Usable)
		}
		err := p.probes.do(ctx, c.work, func(ctx context.Context) error { return p.probe(ctx, pc, c) })
		if err != nil && err == ctx.Err() {
			// This publish's own context ended while it waited for
			// another's probe.
			return nil, fmt.Errorf("queuey: publish to %q: waiting for a probe of its divert queue %q: %w", c.work, c.divert, err)
		}
		if err != nil {
			return nil, err
		}
	}
}

// probe learns whether c's divert queue exists, on pc, and stores the result
// in c. A probe lost with its channel or connection is sent once more, on a
// channel opened once the connection is back.
func (p *Producer) probe(ctx context.Context, pc *pubChannel, c *divertCache) error {
	for try := 0; ; try++ {
		err := p.open(ctx, pc)
		var r *probeResult
		if err == nil {
			r, err = p.probeOnce(ctx, pc, c.divert)
		}
		if err == nil {
			c.last.Store(r)
			return nil
		}
		if try == 0 && lostWithConnection(err) && ctx.Err() == nil {
			continue
		}
		return fmt.Errorf("queuey: publish to %q: probe for its divert queue %q: %w", c.work, c.divert, err)
	}
}

// probeOnce publishes an empty, transient, mandatory message to the divert
// queue divert on pc, an open channel that carries nothing else meanwhile,
// and reads the answer: a basic.return with the ack means the queue does not
// exist; a basic.nack that it does (it refuses every message). An ack
// without a return means the message reached a queue, which only a divert
// queue being deleted meanwhile does: that counts as diverted, since the
// migration queue outlives the divert queue by DivertGrace.
func (p *Producer) probeOnce(ctx context.Context, pc *pubChannel, divert string) (*probeResult, error) {
	sentAt := time.Now()
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, "", divert, true, false, amqp.Publishing{})
	if err != nil {
		return nil, err
	}
	p.probesSent.Add(1)
	acked, err := dc.WaitContext(ctx)
	if p.hooks.probed != nil {
		p.hooks.probed()
	}
	switch {
	case err != nil:
		// Its confirm, still due, would be mistaken for the next
		// publisher's: throw the channel away.
		pc.discard()
		return nil, err
	case !acked && pc.ch.IsClosed():
		// amqp091-go settles the confirms of a closed channel as nacks.
		return nil, amqp.ErrClosed
	case !acked:
		return &probeResult{sentAt: sentAt, diverted: true}, nil
	}
	// As in sendOn: the return, if any, was handed to pc.returns before
	// the ack.
	returned := false
	for {
		select {
		case r, ok := <-pc.returns:
			if ok && r.RoutingKey == divert {
				returned = true
			}
			if ok {
				continue
			}
		default:
		}
		return &probeResult{sentAt: sentAt, diverted: !returned}, nil
	}
}
