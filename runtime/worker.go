package queuey

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
	"github.com/queuey/terraform-provider-queuey/runtime/internal/jobutil"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// settleTimeout bounds how long settling one delivery may wait for its
// republish (a retry, a deferral, a dead letter) to be confirmed, including
// waiting for a lost connection to come back. A delivery whose republish
// failed is returned to its queue, never acknowledged.
const settleTimeout = 30 * time.Second

// Resubscribing to a work queue that has gone (deleted, as during a
// migration) is polled from resubscribeMinBackoff, doubling to
// resubscribeMaxBackoff, with jitter. The cap is lower than the reconnect
// backoff's: a migration recreates the queue within seconds, and every
// second of polling is a second of a stalled queue.
const (
	resubscribeMinBackoff = 500 * time.Millisecond
	resubscribeMaxBackoff = 5 * time.Second
)

// publisher is what a pool needs of a Producer to settle deliveries.
type publisher interface {
	publishEnvelopeWith(ctx context.Context, env Envelope, holdTTLms int64, headers amqp.Table) error
	publishRaw(ctx context.Context, queue string, msg amqp.Publishing) error
}

var _ publisher = (*Producer)(nil)

// WorkerPool consumes the work queues of a queue set and runs the registered
// workers on their jobs. It publishes a retry, a deferral or a dead letter
// before it acknowledges the delivery it came from, so a job survives a crash
// at any point: delivery is at least once.
//
// The pool reconnects by itself when the connection is lost (backing off
// from 500 ms to 30 s, with jitter), declares the set again and resubscribes.
// When the broker cancels a consumer because its queue was deleted (as a
// migration does), the pool polls until the queue is back and resubscribes;
// it never recreates the queue itself, which would race the migration.
type WorkerPool struct {
	set     QueueSet
	disp    *Dispatcher
	opts    WorkerOptions
	log     *slog.Logger
	conn    *conn
	pub     publisher
	ownPub  *Producer // closed by Stop; nil when the caller supplied it
	queues  []*poolQueue
	sem     chan struct{}
	connCfg amqp.Config

	// jobCtx is the parent of every handler's context. It is cancelled only
	// when a Stop's context expires: a graceful stop lets handlers finish.
	jobCtx    context.Context
	jobCancel context.CancelFunc
	// stopCtx is cancelled when Stop begins: nothing more is pulled.
	stopCtx    context.Context
	stopCancel context.CancelFunc

	mu       sync.Mutex
	started  bool
	stopping bool
	sessions map[*poolQueue]*session

	consumers sync.WaitGroup // one per queue
	handlers  sync.WaitGroup // one per delivery being handled or settled
}

// poolQueue is one consumed work queue.
type poolQueue struct {
	name        string // logical
	work        string
	dead        string
	prefetch    int
	maxPriority uint8
}

// session is one subscription: a channel and the consumer on it.
type session struct {
	ch  *amqp.Channel
	tag string
	// cancels hears the broker cancel the consumer: its queue was
	// deleted, with the deliveries not yet settled (see giveBack).
	cancels <-chan string
	mu      sync.Mutex
	gone    bool // a cancellation was read from cancels; under mu
}

// cancelled reports whether the broker has cancelled s's consumer, as far
// as amqp091-go has handed it over: it notifies cancels before it closes
// the consumer's deliveries, so a cancellation the client has read by now
// is seen here, by the handlers still running the session's jobs and by
// consume once the deliveries have ended. amqp091-go sends the consumer's
// tag when the broker cancels it, and closes cancels when the channel shuts
// down for any reason, a lost connection included: only a value is a
// cancellation.
func (s *session) cancelled() bool {
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

// NewWorkerPool connects to the broker at url, declares the work and
// dead-letter queues of set (as a producer does), and returns a pool that
// runs workers on them once started. It fails, having declared nothing, for
// an invalid set, a registry with two workers for one kind, a worker whose
// job kind goes to a queue outside the set, or options that cannot be
// followed. Call Start, then Stop; or Run.
func NewWorkerPool(ctx context.Context, url string, set QueueSet, workers *Workers, opts *WorkerOptions) (*WorkerPool, error) {
	if err := set.Validate(); err != nil {
		return nil, err
	}
	p, err := newWorkerPool(set, workers, opts)
	if err != nil {
		return nil, err
	}
	p.conn, err = dial(ctx, url, p.connCfg, declareOnConnect(set, p.log), p.log)
	if err != nil {
		return nil, err
	}
	if p.opts.Producer != nil {
		for _, q := range p.queues {
			if _, ok := p.opts.Producer.queueConfig(q.work); !ok {
				_ = p.conn.close()
				return nil, fmt.Errorf("worker options: the producer was not built from this queue set (it does not know %q), so it could not retry or defer its jobs: build it with NewProducer and the same set, or leave Producer unset", q.work)
			}
		}
		p.pub = p.opts.Producer
	} else {
		prod, err := NewProducer(ctx, url, set, &ProducerOptions{AMQPConfig: p.producerConfig(), Logger: p.log})
		if err != nil {
			_ = p.conn.close()
			return nil, err
		}
		p.pub, p.ownPub = prod, prod
	}
	return p, nil
}

// newWorkerPool checks everything that needs no broker and builds the pool
// without connections.
func newWorkerPool(set QueueSet, workers *Workers, opts *WorkerOptions) (*WorkerPool, error) {
	disp, err := NewDispatcher(workers, opts)
	if err != nil {
		return nil, err
	}
	o := disp.opts
	byName := map[string]QueueConfig{}
	for _, q := range set.Queues {
		byName[q.Name] = q
		if q.Retry != nil {
			if disp.queueRetry == nil {
				disp.queueRetry = map[string]*RetryPolicy{}
			}
			rp := *q.Retry
			disp.queueRetry[q.Name] = &rp
		}
	}
	for _, kind := range workers.Kinds() {
		h := workers.handlers[kind]
		if _, ok := byName[h.queueName()]; !ok {
			return nil, fmt.Errorf("job kind %q goes to queue %q, which is not in queue set %q: add the queue to the set or change the kind's Queue", kind, h.queueName(), set.Prefix)
		}
	}
	for name := range o.RetryByQueue {
		if _, ok := byName[name]; !ok {
			return nil, fmt.Errorf("retry override for queue %q: the queue is not in queue set %q", name, set.Prefix)
		}
	}
	names := o.Queues
	if len(names) == 0 {
		for _, q := range set.Queues {
			names = append(names, q.Name)
		}
	}
	p := &WorkerPool{set: set, disp: disp, opts: o, log: o.Logger, sessions: map[*poolQueue]*session{}}
	seen := map[string]bool{}
	total := 0
	for _, name := range names {
		qc, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("worker options: queue %q to consume is not in queue set %q", name, set.Prefix)
		}
		if seen[name] {
			continue
		}
		if qc.prefetch() > math.MaxUint16 {
			return nil, fmt.Errorf("queue %q: prefetch %d is above AMQP's limit of %d", name, qc.prefetch(), math.MaxUint16)
		}
		seen[name] = true
		tq := qc.topology()
		work := set.WorkQueue(name)
		p.queues = append(p.queues, &poolQueue{name: name, work: work, dead: topology.DeadName(work), prefetch: qc.prefetch(), maxPriority: uint8(tq.MaxPriority)})
		total += qc.prefetch()
	}
	if o.Concurrency == 0 {
		o.Concurrency = total
		p.opts.Concurrency = total
	}
	p.sem = make(chan struct{}, o.Concurrency)
	p.connCfg = p.consumerConfig()
	p.jobCtx, p.jobCancel = context.WithCancel(context.Background())
	p.stopCtx, p.stopCancel = context.WithCancel(context.Background())
	return p, nil
}

// consumerConfig is the AMQP configuration of the consuming connection:
// the caller's, without amqp091-go's own recovery, and named after the set
// so that an operator can tell it apart in the management UI.
func (p *WorkerPool) consumerConfig() amqp.Config {
	var cfg amqp.Config
	if p.opts.AMQPConfig != nil {
		cfg = *p.opts.AMQPConfig
	}
	cfg.Recovery = nil
	cfg.Properties = maps.Clone(cfg.Properties)
	if cfg.Properties == nil {
		cfg.Properties = amqp.Table{}
	}
	if _, named := cfg.Properties["connection_name"]; !named {
		cfg.Properties["connection_name"] = "queuey worker " + p.set.Prefix
	}
	return cfg
}

// producerConfig is the AMQP configuration of the pool's own producer.
func (p *WorkerPool) producerConfig() *amqp.Config {
	cfg := p.consumerConfig()
	if name, ok := cfg.Properties["connection_name"].(string); ok {
		cfg.Properties["connection_name"] = name + " (publisher)"
	}
	return &cfg
}

// Start subscribes to every consumed queue and returns; jobs are handled in
// the background until Stop.
func (p *WorkerPool) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.stopping:
		return ErrClosed
	case p.started:
		return errors.New("queuey: the worker pool is already started")
	}
	p.started = true
	for _, q := range p.queues {
		p.consumers.Add(1)
		go p.consume(q)
	}
	p.log.Info("queuey: worker pool started", "prefix", p.set.Prefix, "queues", len(p.queues), "concurrency", cap(p.sem))
	return nil
}

// Stop shuts the pool down gracefully: it cancels its consumers so that
// nothing more is pulled, lets every job already pulled finish and settles
// it (ack, retry, deferral or dead letter), then closes its connections. If
// ctx ends first, the handlers' contexts are cancelled and the jobs they were
// running are returned to their queues as they were (a shutdown is not an
// attempt: ActionRequeue), and Stop returns ctx's error once they are. A
// second Stop returns ErrClosed.
func (p *WorkerPool) Stop(ctx context.Context) error {
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		return ErrClosed
	}
	p.stopping = true
	p.stopCancel()
	sessions := slices.Collect(maps.Values(p.sessions))
	p.mu.Unlock()

	for _, s := range sessions {
		// Cancelling the consumer makes amqp091-go hand over the
		// deliveries it already holds and then close the delivery
		// channel; a closed channel has no consumer left to cancel.
		_ = s.ch.Cancel(s.tag, false)
	}
	done := make(chan struct{})
	go func() {
		p.consumers.Wait()
		p.handlers.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		p.log.Warn("queuey: worker pool stop timed out; cancelling the jobs still running", "error", ctx.Err())
		p.jobCancel()
		<-done
		err = ctx.Err()
	}
	p.jobCancel()
	if cerr := p.conn.close(); cerr != nil && !errors.Is(cerr, ErrClosed) && err == nil {
		err = cerr
	}
	if p.ownPub != nil {
		if cerr := p.ownPub.Close(); cerr != nil && !errors.Is(cerr, ErrClosed) && err == nil {
			err = cerr
		}
	}
	p.log.Info("queuey: worker pool stopped", "prefix", p.set.Prefix)
	return err
}

// Run starts the pool, handles jobs until ctx is done, then stops it
// gracefully, waiting for every job already pulled.
func (p *WorkerPool) Run(ctx context.Context) error {
	if err := p.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	return p.Stop(context.Background())
}

func (p *WorkerPool) isStopping() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopping
}

// consume keeps a subscription to q alive until the pool stops: it
// subscribes, hands deliveries out, and subscribes again when the
// subscription ends for any reason but Stop.
func (p *WorkerPool) consume(q *poolQueue) {
	defer p.consumers.Done()
	failures := 0
	for !p.isStopping() {
		ch, err := p.conn.channel(p.stopCtx)
		if err != nil {
			if p.isStopping() || errors.Is(err, ErrClosed) {
				return
			}
			p.log.Warn("queuey: could not open a channel to consume", "queue", q.work, "error", err)
			p.pause(resubscribeBackoff(failures))
			failures++
			continue
		}
		deliveries, s, err := p.subscribe(ch, q)
		if err != nil {
			_ = ch.Close()
			if p.isStopping() {
				return
			}
			if failures == 0 || failures%10 == 0 {
				p.log.Warn("queuey: could not subscribe to the work queue; retrying until it exists", "queue", q.work, "error", err)
			}
			p.pause(resubscribeBackoff(failures))
			failures++
			continue
		}
		if failures > 0 {
			p.log.Info("queuey: subscribed to the work queue again", "queue", q.work)
		}
		failures = 0
		p.serve(ch, q, s, deliveries)

		p.mu.Lock()
		delete(p.sessions, q)
		p.mu.Unlock()
		switch {
		case s.cancelled():
			p.log.Warn("queuey: the broker cancelled the consumer (was the work queue deleted?); resubscribing once it is back", "queue", q.work, "consumer", s.tag)
		case !p.isStopping():
			p.log.Warn("queuey: the subscription ended (channel or connection lost); resubscribing", "queue", q.work)
		}
	}
}

// subscribe sets the prefetch and starts a consumer on ch, registering the
// session so that Stop can cancel it.
func (p *WorkerPool) subscribe(ch *amqp.Channel, q *poolQueue) (<-chan amqp.Delivery, *session, error) {
	if err := ch.Qos(q.prefetch, 0, false); err != nil {
		return nil, nil, fmt.Errorf("set prefetch: %w", err)
	}
	s := &session{ch: ch, tag: "queuey-" + q.work + "-" + jobutil.NewID()[:8], cancels: ch.NotifyCancel(make(chan string, 1))}
	deliveries, err := ch.Consume(q.work, s.tag, false, false, false, false, nil)
	if err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	stopping := p.stopping
	if !stopping {
		p.sessions[q] = s
	}
	p.mu.Unlock()
	if stopping {
		// Stop ran between Consume and here and could not see this
		// consumer: cancel it, and serve what it already pulled.
		_ = ch.Cancel(s.tag, false)
	}
	return deliveries, s, nil
}

// serve hands each delivery to a handler goroutine, bounded by the pool's
// concurrency, until the delivery channel closes. The channel is closed in
// the background once every delivery taken from it is settled, so that their
// acks can still reach the broker while the next subscription starts.
func (p *WorkerPool) serve(ch *amqp.Channel, q *poolQueue, s *session, deliveries <-chan amqp.Delivery) {
	var inflight sync.WaitGroup
	p.handlers.Add(1)
	defer func() {
		go func() {
			defer p.handlers.Done()
			inflight.Wait()
			_ = ch.Close()
		}()
	}()
	for d := range deliveries {
		p.sem <- struct{}{}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-p.sem }()
			p.handle(q, s, d)
		}()
	}
}

// handle runs one delivery of session s through the dispatcher and settles
// it.
func (p *WorkerPool) handle(q *poolQueue, s *session, d amqp.Delivery) {
	start := time.Now()
	o := p.disp.Dispatch(p.jobCtx, q.name, d.Body)
	p.settle(q, s, d, o, time.Since(start))
}

// settle carries out an outcome: for anything but an ack, it publishes first
// and acknowledges only once the broker confirmed the publish. A delivery
// whose publish failed is returned to its queue.
func (p *WorkerPool) settle(q *poolQueue, s *session, d amqp.Delivery, o Outcome, took time.Duration) {
	if o.Action == ActionRequeue {
		if p.giveBack(q, s, d, o) {
			p.log.Warn("queuey: job interrupted by the shutdown; returned to the queue at the same attempt", "queue", q.work, "job_id", o.Job.ID, "job_type", o.Job.Type, "attempt", o.Job.Attempt, "duration", took)
		}
		return
	}
	if o.Action == ActionAck {
		// The common case: no publish to bound, and no log record to
		// build when Info is off.
		p.ack(d, q, o)
		if p.log.Enabled(context.Background(), slog.LevelInfo) {
			p.log.Info("queuey: job done", "queue", q.work, "job_id", o.Job.ID, "job_type", o.Job.Type, "attempt", o.Job.Attempt, "duration", took)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	attrs := []any{"queue", q.work, "job_id", o.Job.ID, "job_type", o.Job.Type, "attempt", o.Job.Attempt}
	switch o.Action {
	case ActionRetry, ActionDefer:
		env := *o.env
		env.Queue = q.work
		if o.Action == ActionRetry {
			env.Attempt++
			env.Priority = 0
		} else {
			env.Deferrals++
			env.Priority = q.maxPriority
		}
		if err := p.pub.publishEnvelopeWith(ctx, env, o.HoldTTL.Milliseconds(), withoutDeadLetterHeaders(d.Headers)); err != nil {
			p.requeue(d, q, s, o, err)
			return
		}
		p.ack(d, q, o)
		if o.Action == ActionRetry {
			p.log.Warn("queuey: job failed; retrying", append(attrs, "max_attempts", o.Job.MaxAttempts, "delay", o.HoldTTL, "error", o.Err)...)
		} else {
			p.log.Info("queuey: job deferred", append(attrs, "delay", o.HoldTTL, "reason", o.Reason, "deferrals", env.Deferrals)...)
		}

	case ActionDeadLetter:
		attempts := o.Job.Attempt
		if o.env == nil {
			attempts = headerInt(d.Headers, topology.HeaderAttempt)
		}
		p.runDeadLetterHook(ctx, DeadLetter{Body: d.Body, Err: o.Err, Job: o.Job, Queue: q.work, Reason: o.Reason})
		if err := p.pub.publishRaw(ctx, q.dead, deadLetterPublishing(d, o.Reason, q.work, attempts)); err != nil {
			p.requeue(d, q, s, o, err)
			return
		}
		p.ack(d, q, o)
		p.log.Error("queuey: job dead-lettered", append(attrs, "dead_letter_queue", q.dead, "reason", o.Reason, "error", o.Err)...)
	}
}

func (p *WorkerPool) ack(d amqp.Delivery, q *poolQueue, o Outcome) {
	if err := d.Ack(false); err != nil {
		// The channel is gone, and with it the delivery: the broker
		// delivers the job again, so it may run (or be republished) twice.
		p.log.Warn("queuey: could not acknowledge a settled job; the broker will deliver it again", "queue", q.work, "job_id", o.Job.ID, "action", o.Action, "error", err)
	}
}

// requeue returns a delivery whose republish failed to its queue. It waits a
// moment first (unless the pool is stopping), so that a broker that keeps
// refusing the publish does not turn the delivery into a hot loop.
func (p *WorkerPool) requeue(d amqp.Delivery, q *poolQueue, s *session, o Outcome, err error) {
	p.log.Error("queuey: could not publish the job's "+o.Action.String()+"; returning the delivery to the queue", "queue", q.work, "job_id", o.Job.ID, "error", err)
	t := time.NewTimer(time.Second)
	select {
	case <-t.C:
	case <-p.stopCtx.Done():
		t.Stop()
	}
	p.giveBack(q, s, d, o)
}

// giveBack returns delivery d of session s to its work queue unsettled:
// with a requeue (basic.nack), or, once the broker has cancelled the
// session's consumer because the queue was deleted (a migration replacing
// it), by publishing it to the work queue again and acknowledging it. A
// requeue then would drop it: the queue that delivered it is gone, and
// deleting a queue discards the deliveries its consumers hold. The publish
// goes where a producer's would, into the migration queue while the
// migration runs. A requeue sent just before the cancellation arrives can
// still cross the deletion. giveBack logs its failures, and reports whether
// the job is back in its queue, or will be once the channel closes.
func (p *WorkerPool) giveBack(q *poolQueue, s *session, d amqp.Delivery, o Outcome) bool {
	if !s.cancelled() {
		if err := d.Nack(false, true); err != nil {
			p.log.Warn("queuey: could not return the job to its queue; the broker will deliver it again when the channel closes", "queue", q.work, "job_id", o.Job.ID, "error", err)
		}
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	msg := divert.Republishing(d)
	// The broker refuses a user id that is not the publishing
	// connection's user.
	msg.UserId = ""
	if err := p.pub.publishRaw(ctx, q.work, msg); err != nil {
		// A requeue would drop it too: leave it to the channel's close.
		p.log.Error("queuey: the job's queue was deleted while the job ran, and publishing the job to it again failed: unless a try of that publish reached the queue after all, the job is lost", "queue", q.work, "job_id", o.Job.ID, "error", err)
		return false
	}
	p.ack(d, q, o)
	return true
}

// runDeadLetterHook runs OnDeadLetter, recovering its panic.
func (p *WorkerPool) runDeadLetterHook(ctx context.Context, dl DeadLetter) {
	if p.opts.OnDeadLetter == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("queuey: the dead-letter hook panicked", "queue", dl.Queue, "job_id", dl.Job.ID, "panic", r)
		}
	}()
	p.opts.OnDeadLetter(ctx, dl)
}

// pause sleeps for d or until the pool stops.
func (p *WorkerPool) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.stopCtx.Done():
	}
}

// resubscribeBackoff is the wait after n failed subscriptions in a row.
func resubscribeBackoff(n int) time.Duration {
	d := resubscribeMaxBackoff
	if n < 8 {
		d = min(resubscribeMinBackoff<<n, resubscribeMaxBackoff)
	}
	return d/2 + rand.N(d/2+1)
}

// deadLetterPublishing is the dead letter of d: its body verbatim, its
// properties, its headers without the broker's x-death ones, plus why, from
// where, and after how many attempts. It is persistent whatever d was: the
// dead-letter queue is durable, and a dead letter lost on a restart is one
// nobody will ever know about.
func deadLetterPublishing(d amqp.Delivery, reason, work string, attempts int) amqp.Publishing {
	h := stripDeathHeaders(d.Headers)
	h[topology.HeaderDeathReason] = reason
	h[topology.HeaderOriginalQueue] = work
	h[topology.HeaderAttempts] = int64(attempts)
	return amqp.Publishing{
		Headers:         h,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		// Expiration is left out (the dead letter must not expire) and
		// so is UserId (the broker refuses one that is not the
		// publishing connection's user).
		Body: d.Body,
	}
}

// withoutDeadLetterHeaders copies h without the headers a dead letter gets,
// so that a dead letter replayed into its work queue and then retried does
// not carry the reason it died the first time.
func withoutDeadLetterHeaders(h amqp.Table) amqp.Table {
	if h == nil {
		return nil
	}
	out := make(amqp.Table, len(h))
	for k, v := range h {
		switch k {
		case topology.HeaderDeathReason, topology.HeaderOriginalQueue, topology.HeaderAttempts:
		default:
			out[k] = v
		}
	}
	return out
}

// headerInt reads an integer header of any AMQP integer width, or 0.
func headerInt(h amqp.Table, key string) int {
	switch v := h[key].(type) {
	case int64:
		return int(v)
	case int32:
		return int(v)
	case int16:
		return int(v)
	case int8:
		return int(v)
	case uint8:
		return int(v)
	case uint16:
		return int(v)
	case uint32:
		return int(v)
	case int:
		return v
	}
	return 0
}
