//go:build integration

package queuey

// Stalling a producer against a real broker, where the broker's timing
// matters: seams (producer.go) wrap the producer's confirmers and hold
// declarations, so the production type carries no test hooks.

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// stalls are the points a test stalls a producer at. Each, when set, runs in
// the publishing goroutine; set them before the producer publishes.
type stalls struct {
	// beforeSend runs before a group of jobs is written (after its
	// routing, and after a held job's declaration).
	beforeSend func()
	// afterProbe runs once a probe of a divert queue has its answer,
	// before the result is read.
	afterProbe func()
	// confirmed runs once the confirm of the k-th job (from 0) of a
	// group was read, before the next is waited for.
	confirmed func(k int)
	// declare runs the n-th declaration of a hold queue (from 1), given
	// the real one.
	declare func(n int, real func() (time.Time, error)) (time.Time, error)
}

func (st *stalls) seams() *seams {
	return &seams{
		confirmer: func(c confirmer) confirmer {
			sc := &stallingConfirmer{confirmer: c, st: st}
			if cc, ok := c.(*channelConfirmer); ok {
				dial := cc.dial
				cc.dial = func(ctx context.Context) (confirmChannel, <-chan amqp.Return, error) {
					ch, returns, err := dial(ctx)
					if err != nil {
						return nil, nil, err
					}
					return stallingChannel{confirmChannel: ch, sc: sc}, returns, nil
				}
			}
			return sc
		},
		holds: func(h holdDeclarer) holdDeclarer { return &stallingHolds{holdDeclarer: h, st: st} },
	}
}

type stallingConfirmer struct {
	confirmer
	st *stalls
	// jobs counts the jobs of the current group whose confirms were read:
	// of the one group in flight, for the tests that read it (they enqueue
	// from one goroutine). Atomic, because pipelined callers share the
	// confirmer and the count goes on regardless.
	jobs atomic.Int64
}

func isProbe(group []outbound) bool {
	return len(group) == 1 && strings.HasSuffix(group[0].rk, topology.DivertSuffix)
}

func (s *stallingConfirmer) publish(ctx context.Context, group []outbound) []fate {
	probe := isProbe(group)
	if !probe && s.st.beforeSend != nil {
		s.st.beforeSend()
	}
	s.jobs.Store(0)
	fates := s.confirmer.publish(ctx, group)
	if probe && s.st.afterProbe != nil {
		s.st.afterProbe()
	}
	return fates
}

// stallingChannel runs stalls.confirmed after each job's confirm.
type stallingChannel struct {
	confirmChannel
	sc *stallingConfirmer
}

func (c stallingChannel) publish(ctx context.Context, rk string, msg amqp.Publishing) (confirmation, error) {
	conf, err := c.confirmChannel.publish(ctx, rk, msg)
	if err != nil || strings.HasSuffix(rk, topology.DivertSuffix) {
		return conf, err
	}
	return stallingConfirmation{confirmation: conf, sc: c.sc}, nil
}

type stallingConfirmation struct {
	confirmation
	sc *stallingConfirmer
}

func (c stallingConfirmation) WaitContext(ctx context.Context) (bool, error) {
	ok, err := c.confirmation.WaitContext(ctx)
	k := int(c.sc.jobs.Add(1) - 1)
	if err == nil && c.sc.st.confirmed != nil {
		c.sc.st.confirmed(k)
	}
	return ok, err
}

type stallingHolds struct {
	holdDeclarer
	st *stalls
	n  int
}

func (h *stallingHolds) declareHold(ctx context.Context, hold, work string, ttlMs int64, durable bool) (time.Time, error) {
	real := func() (time.Time, error) { return h.holdDeclarer.declareHold(ctx, hold, work, ttlMs, durable) }
	if h.st.declare == nil {
		return real()
	}
	h.n++
	return h.st.declare(h.n, real)
}

// newStalledProducer is newTestProducer with st's stalls.
func newStalledProducer(t *testing.T, b *testBroker, queues []QueueConfig, opts *ProducerOptions, st *stalls) *Producer {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p, err := dialProducer(ctx, b.url, QueueSet{Prefix: b.prefix, Queues: queues}, opts, st.seams())
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
