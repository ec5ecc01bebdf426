package queuey

// A queue whose node is down. A classic queue lives on one node of a
// cluster; while that node is down RabbitMQ answers a declaration,
// passive or not, and a consume with 404 NOT_FOUND ("home node ... is down
// or inaccessible", or, measured on 4.0.5 after a clean stop, "queue ...
// process is stopped by supervisor"), and nacks a publish to it under
// confirms. The runtime waits for the node within the caller's bounds
// (a producer's context, a pool until it stops), says which queue and why,
// and sends a held job to a neighbouring hold queue on a live node.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// ErrNodeDown is matched by the error of a publish that gave up because its
// queue's node was down: the queue is a classic one, which lives on one
// node. A quorum queue (QueueConfig.QueueType) survives the loss of a
// minority of nodes.
var ErrNodeDown = errors.New("the queue's node is down")

// nodeDownReason is RabbitMQ's reply when err says that a queue's node is
// down, and "" otherwise.
func nodeDownReason(err error) string {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		return ""
	}
	r := ae.Reason
	if strings.Contains(r, "home node") && strings.Contains(r, "down or inaccessible") || strings.Contains(r, "process is stopped by supervisor") {
		return r
	}
	return ""
}

// Waits for a queue whose node is down: from nodeDownMinBackoff, doubling
// to nodeDownMaxBackoff, so that the node's return is noticed within a few
// seconds.
const (
	nodeDownMinBackoff = 250 * time.Millisecond
	nodeDownMaxBackoff = 2 * time.Second
)

// nodeDownBackoff is the wait after n nacks in a row of a queue whose node
// is down.
func nodeDownBackoff(n int) time.Duration {
	return min(nodeDownMinBackoff<<min(n, 8), nodeDownMaxBackoff)
}

// queueNodeDown asks the broker, with a passive declaration on a channel of
// its own, whether queue's node is down, and returns RabbitMQ's reply when
// it is.
func (p *Producer) queueNodeDown(ctx context.Context, queue string) string {
	if p.conn == nil {
		return "" // the delivery loop's unit tests: no broker to ask
	}
	ch, err := p.conn.channel(ctx)
	if err != nil {
		return ""
	}
	defer func() { _ = ch.Close() }()
	_, err = ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	return nodeDownReason(err)
}

// judgeNacked is judge's row for a nacked job: when its queue's node is
// down, wait and send again, not counted as a try, until the context ends;
// otherwise fail with ErrNacked.
func (p *Producer) judgeNacked(ctx context.Context, d *delivery) {
	reason := p.queueNodeDown(ctx, d.key)
	if reason == "" {
		d.fail(fmt.Errorf("queuey: publish to %s: %w", d.target(), ErrNacked))
		return
	}
	err := fmt.Errorf("queuey: publish to %s: %w: RabbitMQ nacked the job and says %q; a classic queue lives on one node and takes no job until that node is back (a quorum queue would)", d.target(), ErrNodeDown, reason)
	if d.nodeDown == 0 {
		p.opts.Logger.Warn("queuey: the job's queue is on a node that is down; waiting for it", "queue", d.key, "job_id", d.msg.MessageId, "reason", reason)
	}
	if !sleep(ctx, nodeDownBackoff(d.nodeDown)) {
		d.fail(fmt.Errorf("%w; gave up waiting: %w", err, ctx.Err()))
		return
	}
	d.nodeDown++
	d.tries--
	d.err, d.next = err, stepSend
}

// maxHoldNeighbours bounds how many neighbouring hold queues a held publish
// tries when its hold queue's node is down.
const maxHoldNeighbours = 8

// declareHeld declares d's hold queue as declareHoldOrNeighbour does, and
// while that fails because a node is down, waits for it as judgeNacked
// does, until the context ends: then the error is ErrNodeDown's.
func (p *Producer) declareHeld(ctx context.Context, d *delivery) (time.Time, error) {
	at, err := p.declareHoldOrNeighbour(ctx, d)
	for reason := nodeDownReason(err); reason != ""; reason = nodeDownReason(err) {
		if d.nodeDown == 0 {
			p.opts.Logger.Warn("queuey: the held job's hold queue and the work queue it releases into are on nodes that are down; waiting for them", "queue", d.key, "work_queue", d.hold.work, "job_id", d.msg.MessageId, "reason", reason)
		}
		if !sleep(ctx, nodeDownBackoff(d.nodeDown)) {
			return at, fmt.Errorf("queuey: declare hold queue %q: %w: RabbitMQ says %q, and the work queue %q it would release the job into is down too, so no other hold queue could take it; gave up waiting: %w", d.key, ErrNodeDown, reason, d.hold.work, ctx.Err())
		}
		d.nodeDown++
		at, err = p.declareHoldOrNeighbour(ctx, d)
	}
	return at, err
}

// declareHoldOrNeighbour declares d's hold queue, and when its node is down
// (the queue exists there, so it cannot be declared anywhere else) the hold
// queue one millisecond longer, and so on, maxHoldNeighbours times at most:
// a new one is placed on a live node (a client-local node, RabbitMQ's
// default), and the job waits a millisecond longer. The jobs already in
// the lost node's hold queue come back when it does, if it is durable.
//
// Only when the work queue is up: a hold queue dead-letters at most once,
// and a release into a work queue whose node is down is dropped (measured
// in the cluster fault run: a classic set's two delayed jobs, neighboured
// while node 1, home of both their hold queue and their work queue, was
// down, were released 1.3 s later and found in no queue). Waiting for the
// lost node keeps them in its hold queue, which releases them once the
// work queue is back with it.
func (p *Producer) declareHoldOrNeighbour(ctx context.Context, d *delivery) (time.Time, error) {
	h := d.hold
	at, err := p.holds.declareHold(ctx, d.key, h.work, h.ttlMs, h.durable)
	if nodeDownReason(err) != "" && p.queueNodeDown(ctx, h.work) != "" {
		return at, err
	}
	for i := 0; i < maxHoldNeighbours && nodeDownReason(err) != "" && h.ttlMs < topology.MaxHoldTTL; i++ {
		down := d.key
		h.ttlMs++
		h.ttl = time.Duration(h.ttlMs) * time.Millisecond
		d.key = topology.HoldName(h.work, h.ttlMs)
		p.opts.Logger.Warn("queuey: the hold queue's node is down; holding the job in the neighbouring hold queue, one millisecond longer", "queue", down, "instead", d.key, "job_id", d.msg.MessageId, "reason", nodeDownReason(err))
		at, err = p.holds.declareHold(ctx, d.key, h.work, h.ttlMs, h.durable)
	}
	return at, err
}
