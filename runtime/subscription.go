package queuey

import (
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/internal/jobutil"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// subscription is one consumer of one work queue, and the one owner of what
// that consumer's deliveries depend on: the channel they came on (an ack
// must go back on it), the consumer tag (Stop cancels by it), the broker's
// cancellation of the consumer (which changes how a delivery is given back,
// see giveBack) and the deliveries taken from it that are not settled yet
// (the channel is closed only once they are). The pool's consume loop makes
// one per consumer it starts, so a resubscription is a new subscription on a
// new channel; once serve returns, the old one only settles what it took.
type subscription struct {
	pool *WorkerPool
	q    *poolQueue
	ch   *amqp.Channel
	tag  string

	deliveries <-chan amqp.Delivery
	// cancels hears the broker cancel the consumer: its queue was
	// deleted, with the deliveries not yet settled (see giveBack).
	cancels <-chan string
	// closes hears why the channel closed: the broker's consumer_timeout
	// among others (see overran).
	closes <-chan *amqp.Error
	mu     sync.Mutex
	gone   bool // a cancellation was read from cancels; under mu
	// held are the deliveries taken and not yet acknowledged or returned
	// to the broker, by delivery tag, with their message id and when they
	// were taken; under mu. A delivery whose ack or nack failed (the
	// channel closed under it) stays: the broker delivers it again. Read
	// only when the broker closed the channel for its consumer_timeout.
	held map[uint64]heldDelivery

	inflight sync.WaitGroup // one per delivery being handled or settled
}

// newSubscription is a subscription to q on ch, not yet consuming.
func newSubscription(p *WorkerPool, q *poolQueue, ch *amqp.Channel) *subscription {
	return &subscription{pool: p, q: q, ch: ch, tag: "queuey-" + q.work + "-" + jobutil.NewID()[:8], held: map[uint64]heldDelivery{}}
}

// subscribe sets the prefetch and starts the consumer, registering s with
// the pool so that Stop can cancel it. On an error the channel is closed and
// s is done with.
func (s *subscription) subscribe() error {
	if err := s.ch.Qos(s.q.prefetch, 0, false); err != nil {
		_ = s.ch.Close()
		return fmt.Errorf("set prefetch: %w", err)
	}
	s.cancels = s.ch.NotifyCancel(make(chan string, 1))
	s.closes = s.ch.NotifyClose(make(chan *amqp.Error, 1))
	var args amqp.Table
	if !s.q.topo.Quorum() {
		args = classicConsumeArgs
	}
	deliveries, err := s.ch.Consume(s.q.work, s.tag, false, false, false, false, args)
	if err != nil {
		_ = s.ch.Close()
		return err
	}
	s.deliveries = deliveries
	if !s.pool.register(s) {
		// Stop ran between Consume and here and could not see this
		// consumer: cancel it, and serve what it already pulled.
		s.cancel()
	}
	return nil
}

// classicConsumeArgs are the arguments of a pool's consumer of a classic
// queue.
//
// x-cancel-on-ha-failover makes RabbitMQ 3.x cancel the consumer when its
// queue goes away, as 4.x always does. Without it, a 3.x channel that
// learns of the queue's end consumes again from the queue of the same name
// (meant for a mirrored queue's failover): when the queue was deleted and
// declared again before the channel handled its end, as a migration does
// within milliseconds, the consumer is registered on the new queue without
// a word to the client, and the channel then drops what that queue
// delivers to it (it forgets the queue once it has consumed again). The
// new queue counts those deliveries unacknowledged, so, once the prefetch
// is used up, it delivers nothing more, with its jobs ready and the pool
// idle (seen here: 3,707 ready, 16 unacknowledged, 1 consumer, and the
// channel itself holding none). Cancelled instead, the pool subscribes
// again (consume) and gets the new queue's jobs. RabbitMQ 4.x, which no
// longer re-consumes, ignores the argument. A quorum queue's consumer goes
// without: RabbitMQ 3.x refuses the argument for quorum queues
// (PRECONDITION_FAILED, "invalid arg").
var classicConsumeArgs = amqp.Table{"x-cancel-on-ha-failover": true}

// cancel asks the broker to stop delivering to s. amqp091-go then hands
// over the deliveries it already holds and closes the delivery channel, so
// serve returns once they are handed out; a closed channel has no consumer
// left to cancel.
func (s *subscription) cancel() {
	_ = s.ch.Cancel(s.tag, false)
}

// cancelled reports whether the broker has cancelled s's consumer, as far
// as amqp091-go has handed it over: it notifies cancels before it closes
// the consumer's deliveries, so a cancellation the client has read by now
// is seen here, by the handlers still running the subscription's jobs and
// by consume once the deliveries have ended. amqp091-go sends the
// consumer's tag when the broker cancels it, and closes cancels when the
// channel shuts down for any reason, a lost connection included: only a
// value is a cancellation.
func (s *subscription) cancelled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.gone && s.cancels != nil {
		select {
		case _, ok := <-s.cancels:
			s.gone = ok
		default:
		}
	}
	return s.gone
}

// serve hands each delivery to a handler goroutine, bounded by the pool's
// concurrency, until the delivery channel closes. The channel is closed in
// the background once every delivery taken from it is settled, so that their
// acks can still reach the broker while the next subscription starts; the
// pool's handlers group waits for that close.
//
// The handler goroutines live as long as serve does, each taking delivery
// after delivery, rather than one per delivery: a goroutine grows its stack
// while it decodes and settles a job, and a new one grew it afresh every
// time (in the worker bench's profile, runtime.newstack took a fifth as
// much CPU as the handlers themselves: 0.40 s beside 1.99 s). serve starts
// one only when none is free, and no more than the pool's concurrency.
func (s *subscription) serve() {
	p := s.pool
	p.handlers.Add(1)
	work := make(chan amqp.Delivery)
	handlers := 0
	defer func() {
		close(work) // the handler goroutines return once they are free
		go func() {
			defer p.handlers.Done()
			s.inflight.Wait()
			_ = s.ch.Close()
		}()
	}()
	for d := range s.deliveries {
		s.mu.Lock()
		s.held[d.DeliveryTag] = heldDelivery{id: d.MessageId, at: time.Now()}
		s.mu.Unlock()
		p.sem <- struct{}{}
		s.inflight.Add(1)
		select {
		case work <- d: // a free handler goroutine took it
			continue
		default:
		}
		if handlers < cap(p.sem) {
			handlers++
			go s.handleEach(d, work)
			continue
		}
		// Every goroutine is busy or about to be free: serve holds a
		// place of the concurrency, so at most cap-1 of them hold one.
		work <- d
	}
}

// handleEach handles d, then each delivery serve hands over work, until
// serve closes it. Its jobs' handlers run on one runner goroutine.
func (s *subscription) handleEach(d amqp.Delivery, work <-chan amqp.Delivery) {
	var r runner
	defer r.abandon()
	for ok := true; ok; d, ok = <-work {
		s.handleHeld(d, &r)
	}
}

// handleHeld handles d and gives back its place of the pool's concurrency.
func (s *subscription) handleHeld(d amqp.Delivery, r *runner) {
	defer s.inflight.Done()
	defer func() { <-s.pool.sem }()
	s.handle(d, r)
}

// settled records that d's ack or nack was written: the broker will not
// deliver it again for this channel's close (see held).
func (s *subscription) settled(d amqp.Delivery) {
	s.mu.Lock()
	delete(s.held, d.DeliveryTag)
	s.mu.Unlock()
}

// handle runs one delivery through the dispatcher, its handler on r, and
// settles it.
func (s *subscription) handle(d amqp.Delivery, r *runner) {
	start := time.Now()
	why := redeliveryNone
	if d.Redelivered {
		why = s.pool.redelivery(d.MessageId)
	}
	if s.q.topo.Quorum() && topology.LastDeliveries(int64(headerInt(d.Headers, topology.HeaderDeliveryCount))) {
		why = redeliveryLast
	}
	o := s.pool.disp.dispatch(s.pool.jobCtx, s.q.name, d.Body, d.Headers, why, start, r)
	took := time.Since(start)
	err := s.settle(d, o, took)
	if hook := s.pool.opts.OnSettled; hook != nil {
		s.runSettledHook(hook, Settlement{Context: o.context(s.pool.jobCtx), Outcome: o, Queue: s.q.work, Headers: d.Headers,
			ReadyAt: readyAt(d.Headers, o.Job.EnqueuedAt), Received: start, Took: took, Err: err})
	}
}

// runSettledHook runs OnSettled, recovering its panic.
func (s *subscription) runSettledHook(hook func(Settlement), st Settlement) {
	defer func() {
		if r := recover(); r != nil {
			s.pool.log.Error("queuey: the settled hook panicked", append(s.settleAttrs(st.Outcome), "panic", r)...)
		}
	}()
	hook(st)
}

// heldDelivery is a delivery a subscription holds unsettled.
type heldDelivery struct {
	id string    // message id (the job id)
	at time.Time // when serve took it
}

// closeReason is why the broker closed s's channel, once the deliveries
// have ended: amqp091-go notifies closes before it ends the consumers.
// Nil when the channel is open, was closed by the client, or was lost
// with its connection.
func (s *subscription) closeReason() *amqp.Error {
	select {
	case e, ok := <-s.closes:
		if ok {
			return e
		}
	default:
	}
	return nil
}

// isConsumerTimeout reports whether e is the broker closing a channel for
// its consumer_timeout: RabbitMQ 3.10 to 4.x say "PRECONDITION_FAILED -
// delivery acknowledgement on channel 1 timed out. Timeout value used:
// 60000 ms. ...".
func isConsumerTimeout(e *amqp.Error) bool {
	return e != nil && e.Code == amqp.PreconditionFailed && strings.Contains(e.Reason, "delivery acknowledgement") && strings.Contains(e.Reason, "timed out")
}

// overran sorts the deliveries s held when the broker closed its channel
// for its consumer_timeout (limit): those held for about limit or longer
// caused it; the others were only on the same channel. The broker
// redelivers all of them; the pool remembers which is which (see
// WorkerPool.redelivery), so that only the first kind counts an attempt.
func (s *subscription) overran(limit time.Duration) (culprits, bystanders []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, h := range s.held {
		// The broker's clock started when it sent the delivery, a little
		// before serve took it.
		if now.Sub(h.at) >= limit-time.Second {
			culprits = append(culprits, h.id)
		} else {
			bystanders = append(bystanders, h.id)
		}
	}
	return culprits, bystanders
}
