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

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// Resubscribing to a work queue that has gone (deleted, as during a
// migration) is polled from resubscribeMinBackoff, doubling to
// resubscribeMaxBackoff, with jitter. The cap is lower than the reconnect
// backoff's: a migration recreates the queue within seconds, and every
// second of polling is a second of a stalled queue.
const (
	resubscribeMinBackoff = 500 * time.Millisecond
	resubscribeMaxBackoff = 5 * time.Second
)

// redeclareAfter is how long a consumed work queue may stay absent, with no
// migration of it in progress, before the pool declares it again itself:
// the original queuey's upgrade procedure is "drain the queue, delete it,
// let the new version declare it", and a pool that only waited would wait
// forever. It is long enough for a migration that has just begun to have
// declared its migration queue, which is what tells the two apart.
const redeclareAfter = 3 * time.Second

// WorkerPool consumes the work queues of a queue set and runs the registered
// workers on their jobs. It publishes a retry, a deferral or a dead letter
// before it acknowledges the delivery it came from, so a job survives a crash
// at any point: delivery is at least once.
//
// The pool reconnects by itself when the connection is lost (backing off
// from 500 ms to 30 s, with jitter), declares the set again and resubscribes.
// When the broker cancels a consumer because its queue was deleted (as a
// migration does), the pool polls until the queue is back and resubscribes.
// While a migration of the queue runs (its migration queue, topology's
// MigrationName, exists) the pool never declares the queue itself, which
// would race the migration. A queue that stays absent for 3 s with no
// migration in progress (deleted by hand, as the original queuey's upgrade
// procedure does) is declared again by the pool, with its dead-letter
// queue, as at start-up. So a pool still consuming a queue that was removed
// from the Terraform set on purpose declares it again: stop those pools
// before removing the queue.
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

	// valuesCtx is the context NewWorkerPool was given: Start passes its
	// values (not its cancellation) on to every handler.
	valuesCtx context.Context
	// jobCtx is the parent of every handler's context: it carries the
	// values of the context the pool was started with (NewWorkerPool's
	// for Start, Run's for Run) without its cancellation, and is cancelled
	// only when a Stop's context expires: a graceful stop lets handlers
	// finish.
	jobCtx    context.Context
	jobCancel context.CancelFunc
	// stopCtx is cancelled when Stop begins: nothing more is pulled.
	stopCtx    context.Context
	stopCancel context.CancelFunc

	mu       sync.Mutex
	started  bool
	stopping bool
	subs     map[*poolQueue]*subscription // the live subscription of each queue, for Stop
	// overran are the jobs whose channel the broker closed for its
	// consumer_timeout, by message id, until their redelivery: whether
	// the job outlived the timeout (true) or only shared its channel.
	overran map[string]overranJob

	consumers sync.WaitGroup // one per queue
	handlers  sync.WaitGroup // one per subscription, until its last delivery is settled and its channel closed
}

// poolQueue is one consumed work queue.
type poolQueue struct {
	name          string // logical
	work          string
	dead          string
	prefetch      int
	deferPriority uint8          // a deferral's priority, ahead of the backlog (topology.DeferPriority)
	topo          topology.Queue // for declaring it again (see redeclareAfter)
}

// NewWorkerPool connects to the broker at url (which may list several
// nodes of a cluster as hosts, as NewProducer's), declares the work and
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
	p.valuesCtx = ctx
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
	p := &WorkerPool{set: set, disp: disp, opts: o, log: o.Logger, subs: map[*poolQueue]*subscription{}, valuesCtx: context.Background()}
	queues, total, err := consumedQueues(set, byName, o.Queues)
	if err != nil {
		return nil, err
	}
	p.queues = queues
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

// consumedQueues are the queues of set named in names (every queue of set
// when names is empty), each once, in order, and the sum of their prefetch.
func consumedQueues(set QueueSet, byName map[string]QueueConfig, names []string) ([]*poolQueue, int, error) {
	if len(names) == 0 {
		for _, q := range set.Queues {
			names = append(names, q.Name)
		}
	}
	var queues []*poolQueue
	seen := map[string]bool{}
	total := 0
	for _, name := range names {
		qc, ok := byName[name]
		if !ok {
			return nil, 0, fmt.Errorf("worker options: queue %q to consume is not in queue set %q", name, set.Prefix)
		}
		if seen[name] {
			continue
		}
		if qc.prefetch() > math.MaxUint16 {
			return nil, 0, fmt.Errorf("queue %q: prefetch %d is above AMQP's limit of %d", name, qc.prefetch(), math.MaxUint16)
		}
		seen[name] = true
		tq := qc.topology()
		work := set.WorkQueue(name)
		queues = append(queues, &poolQueue{name: name, work: work, dead: topology.DeadName(work), prefetch: qc.prefetch(), deferPriority: topology.DeferPriority(tq), topo: tq})
		total += qc.prefetch()
	}
	return queues, total, nil
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
// the background until Stop. Handlers' contexts carry the values of the
// context given to NewWorkerPool, but not its cancellation or deadline:
// Stop decides when jobs end.
func (p *WorkerPool) Start() error { return p.start(p.valuesCtx) }

// start is Start with the context whose values the handlers see.
func (p *WorkerPool) start(values context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.stopping:
		return ErrClosed
	case p.started:
		return errors.New("queuey: the worker pool is already started")
	}
	p.started = true
	// The job context is replaced before any consumer runs; Stop, which
	// cancels it, reads it under mu.
	p.jobCancel()
	p.jobCtx, p.jobCancel = context.WithCancel(context.WithoutCancel(values))
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
	subs := slices.Collect(maps.Values(p.subs))
	p.mu.Unlock()

	for _, s := range subs {
		s.cancel()
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
// gracefully, waiting for every job already pulled. Handlers' contexts
// carry ctx's values, without its cancellation: the jobs running when ctx
// ends finish, as with Stop.
func (p *WorkerPool) Run(ctx context.Context) error {
	if err := p.start(ctx); err != nil {
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
	var absentSince time.Time // when subscribing first found q absent; zero while it is there
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
		s := newSubscription(p, q, ch)
		if err := s.subscribe(); err != nil {
			if p.isStopping() {
				return
			}
			var ae *amqp.Error
			if reason := nodeDownReason(err); reason != "" {
				// Not absent: its node is down, and declaring it
				// again could not help.
				absentSince = time.Time{}
				if failures == 0 || failures%10 == 0 {
					p.log.Warn("queuey: the work queue's node is down; a classic queue lives on one node and its jobs wait there until the node is back (a quorum queue would have stayed up); subscribing again until then", "queue", q.work, "reason", reason)
				}
			} else if errors.As(err, &ae) && ae.Code == amqp.NotFound {
				if absentSince.IsZero() {
					absentSince = time.Now()
				} else if time.Since(absentSince) >= redeclareAfter && p.redeclareAbsent(q) {
					absentSince = time.Time{}
					continue
				}
			} else {
				absentSince = time.Time{}
			}
			if (failures == 0 || failures%10 == 0) && nodeDownReason(err) == "" {
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
		absentSince = time.Time{}
		s.serve()

		p.mu.Lock()
		delete(p.subs, q)
		p.mu.Unlock()
		switch reason := s.closeReason(); {
		case isConsumerTimeout(reason):
			culprits, bystanders := s.overran(p.opts.ConsumerTimeout)
			p.rememberOverran(culprits, bystanders)
			p.log.Error("queuey: the broker closed the channel because a delivery stayed unacknowledged longer than its consumer_timeout; it redelivers every unacknowledged job of the channel: those that outlived the timeout count an attempt, the others run again as they were; resubscribing",
				"queue", q.work, "consumer_timeout", p.opts.ConsumerTimeout, "outlived", len(culprits), "same_channel", len(bystanders), "reason", reason.Reason)
		case s.cancelled():
			p.log.Warn("queuey: the broker cancelled the consumer (was the work queue deleted?); resubscribing once it is back", "queue", q.work, "consumer", s.tag)
		case !p.isStopping():
			p.log.Warn("queuey: the subscription ended (channel or connection lost); resubscribing", "queue", q.work)
		}
	}
}

// redeclareAbsent declares q's work and dead-letter queues, as at
// start-up, unless a migration of q is in progress (its migration queue
// exists: the migration declares q itself) or q is back. It reports whether
// it declared q; it logs its failures, and consume tries again later.
func (p *WorkerPool) redeclareAbsent(q *poolQueue) bool {
	exists := func(name string) (bool, error) {
		ch, err := p.conn.channel(p.stopCtx)
		if err != nil {
			return false, err
		}
		defer func() { _ = ch.Close() }()
		return queueExistsOn(ch, name)
	}
	for _, name := range []string{topology.MigrationName(q.work), q.work} {
		there, err := exists(name)
		if err != nil {
			p.log.Warn("queuey: could not check whether the absent work queue is being migrated", "queue", q.work, "error", err)
			return false
		}
		if there {
			return false
		}
	}
	ch, err := p.conn.channel(p.stopCtx)
	if err != nil {
		return false
	}
	defer func() { _ = ch.Close() }()
	if err := declareQueue(ch, q.work, q.topo.Durable, topology.WorkArgs(q.topo)); err != nil {
		p.log.Warn("queuey: could not declare the absent work queue again", "queue", q.work, "error", err)
		return false
	}
	if err := declareQueue(ch, q.dead, topology.DeadDurable, topology.DeadArgs(q.topo.Type)); err != nil {
		p.log.Warn("queuey: declared the absent work queue again, but not its dead-letter queue", "queue", q.dead, "error", err)
	}
	p.log.Warn("queuey: the work queue was deleted and stayed absent with no migration in progress; declared it again", "queue", q.work, "absent_for", redeclareAfter)
	return true
}

// overranJob is a job of a channel closed for the consumer timeout.
type overranJob struct {
	outlived bool
	at       time.Time
}

// forgetOverranAfter bounds how long the pool waits for such a job's
// redelivery, which may go to another process.
const forgetOverranAfter = time.Hour

// rememberOverran records the jobs of a channel the broker closed for its
// consumer_timeout, for redelivery to tell them apart.
func (p *WorkerPool) rememberOverran(culprits, bystanders []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.overran == nil {
		p.overran = map[string]overranJob{}
	}
	now := time.Now()
	for id, j := range p.overran {
		if now.Sub(j.at) > forgetOverranAfter {
			delete(p.overran, id)
		}
	}
	for _, id := range culprits {
		p.overran[id] = overranJob{outlived: true, at: now}
	}
	for _, id := range bystanders {
		p.overran[id] = overranJob{at: now}
	}
}

// redelivery is what a redelivery of job id is: a bystander of a consumer
// timeout (not an attempt: it runs), a job that outlived it, or else a run
// whose worker died or lost its connection. Only redeliveries pay for it.
func (p *WorkerPool) redelivery(id string) redeliveryKind {
	p.mu.Lock()
	defer p.mu.Unlock()
	j, ok := p.overran[id]
	if !ok {
		return redeliveryDied
	}
	delete(p.overran, id)
	if j.outlived {
		return redeliveryOverran
	}
	return redeliveryNone
}

// register records s as the subscription of its queue, so that Stop can
// cancel it, and reports false, recording nothing, once Stop has begun.
func (p *WorkerPool) register(s *subscription) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return false
	}
	p.subs[s.q] = s
	return true
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
