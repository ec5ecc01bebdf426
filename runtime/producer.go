package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/internal/jobutil"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// Producer enqueues jobs. It is safe for concurrent use: publishes from many
// goroutines share a pool of channels, many in flight on each channel
// (ProducerOptions.PublishesPerChannel), each call waiting for its own
// publisher confirms.
//
// Queues are named by their logical name (the Name of a QueueConfig); the
// producer adds its prefix. A producer from NewProducer declares its set's
// queues when it connects, and again whenever it reconnects; it can delay
// and defer jobs onto those queues. A producer from NewUndeclaredProducer
// declares nothing and cannot delay or defer.
//
// A declared producer keeps enqueueing while Terraform migrates one of its
// queues (changes its arguments, which RabbitMQ allows only by deleting and
// declaring it again): while the migration's divert queue exists, jobs sent
// to the queue go into its migration queue, which the migration moves back
// once the queue is declared again. The producer checks for the divert queue
// with one small publish per queue at most every 250 ms
// (divert.Recheck), and only while it publishes to that queue.
// The same holds for the dead-letter queues of the set, which a migration
// replaces when their arguments drifted: a worker's dead letters are
// diverted like jobs. Delayed and deferred jobs are not diverted: they wait
// in hold queues, which are the producer's own and never migrated. An
// undeclared producer does not check, not knowing which queues belong to a
// set: a job it publishes at the moment a migration deletes the queue is
// confirmed by the broker and lost.
type Producer struct {
	conn   *conn
	opts   ProducerOptions
	prefix string
	// queues are the work queues of the set by broker name; nil for an
	// undeclared producer.
	queues map[string]topology.Queue

	// pool holds the turns on the publishing channels: each confirmer
	// (one per channel, ProducerOptions.Channels) is in it
	// PublishesPerChannel times, interleaved, and a try holds one turn.
	pool chan confirmer
	// holds declares hold queues (declchannel.go).
	holds holdDeclarer
	// declarations is holds when a test did not replace it; closed by
	// Close.
	declarations *holdDeclarations

	// diverts are the divert caches of the work and dead-letter queues of
	// the set, by broker name; nil for an undeclared producer. See
	// divert.go.
	diverts map[string]*divertCache
	// probes are the probes of divert queues in progress, by queue.
	probes flights
	// probesSent counts the probes sent; read by tests.
	probesSent atomic.Int64
	// heldRenewals counts the hold queues declared again after a held
	// publish, and heldResends the held jobs sent again because their hold
	// queue may have expired with them, or expired before they arrived
	// (see publishHeld); read by tests.
	heldRenewals, heldResends atomic.Int64
	// lateConfirms counts the jobs routed by a probe and confirmed
	// divert.Grace or more after it (see judge), each sent again.
	lateConfirms atomic.Int64

	// enqueue is the options' middleware around an enqueue call's
	// publish; nil when there is none.
	enqueue EnqueueFunc

	mu       sync.RWMutex
	closed   bool
	inflight sync.WaitGroup
	// droppedBlocked is the block Close dropped the connection in (see
	// waitInflight), for the errors of the publishes it ended.
	droppedBlocked atomic.Pointer[PublishingBlock]
	// closing is closed when Close begins, so that a publish waiting for a
	// lost connection to come back gives up with ErrClosed rather than keep
	// Close waiting for it.
	closing chan struct{}
}

// NewProducer connects to the broker at url (an amqp:// or amqps:// URI),
// declares the work and dead-letter queues of set, and returns a producer
// for them. For a cluster, url may list several nodes as hosts,
// amqp://user:pass@node1:5672,node2:5672,node3:5672/vhost: the producer
// connects to the first that answers, in that order, and after losing a
// connection it reconnects starting from the node after that one, and
// declares the set again there. The set is validated first, and nothing is
// declared if it fails. A queue that already exists with other arguments
// fails with a *PreconditionError naming the queue and the argument.
//
// The producer reconnects by itself when the connection is lost (backing off
// from 500 ms to 30 s, with jitter) and declares the set again each time;
// publishes wait for the connection up to their context's deadline. If the
// first connection fails, NewProducer returns the error rather than retry.
// ctx is checked before dialling; the dial itself is bounded by the URI's
// connection_timeout (30 s unless set).
func NewProducer(ctx context.Context, url string, set QueueSet, opts *ProducerOptions) (*Producer, error) {
	return dialProducer(ctx, url, set, opts, nil)
}

// dialProducer is NewProducer, with s for tests (see seams).
func dialProducer(ctx context.Context, url string, set QueueSet, opts *ProducerOptions, s *seams) (*Producer, error) {
	if err := set.Validate(); err != nil {
		return nil, err
	}
	o := opts.resolved()
	if err := o.validate(); err != nil {
		return nil, err
	}
	c, err := dial(ctx, url, o.amqpConfig(), declareOnConnect(set, o.Logger), o.Logger)
	if err != nil {
		return nil, err
	}
	return newProducer(c, &set, set.Prefix, &o, s), nil
}

// NewProducerFromConnection is NewProducer over a connection the caller
// dialled and keeps: Close leaves it open, and the producer cannot reconnect
// it, so publishes fail once it is lost. ProducerOptions.AMQPConfig is
// ignored.
func NewProducerFromConnection(ctx context.Context, ac *amqp.Connection, set QueueSet, opts *ProducerOptions) (*Producer, error) {
	if err := set.Validate(); err != nil {
		return nil, err
	}
	o := opts.resolved()
	if err := o.validate(); err != nil {
		return nil, err
	}
	c, err := wrapConn(ac, func(ac *amqp.Connection) error { return declareSet(ac, set, o.Logger) }, o.Logger)
	if err != nil {
		return nil, err
	}
	return newProducer(c, &set, set.Prefix, &o, nil), nil
}

// NewUndeclaredProducer connects to the broker at url and returns a producer
// that declares nothing: for a process that publishes onto queues another
// process (or Terraform) owns. It can enqueue onto any queue, and a queue
// that does not exist is still an error (ErrUnroutable) at publish time, but
// EnqueueAfter and Defer fail with ErrUnknownQueue: without knowing the work
// queue's configuration there is no hold queue to declare.
//
// Queue names given to its methods are logical names joined to prefix with
// ".", like a declared producer's. With an empty prefix they are the broker
// names of the queues, as they are.
func NewUndeclaredProducer(ctx context.Context, url, prefix string, opts *ProducerOptions) (*Producer, error) {
	if prefix != "" {
		if err := topology.ValidatePrefix(prefix); err != nil {
			return nil, err
		}
	}
	o := opts.resolved()
	if err := o.validate(); err != nil {
		return nil, err
	}
	c, err := dial(ctx, url, o.amqpConfig(), nil, o.Logger)
	if err != nil {
		return nil, err
	}
	return newProducer(c, nil, prefix, &o, nil), nil
}

// seams let a test put its own confirmers and hold declarations under the
// delivery loop: a fake, or a wrapper that stalls the real one where the
// broker's timing matters. Production passes none.
type seams struct {
	// confirmer, when set, returns the confirmer of each publishing
	// channel, given the real one.
	confirmer func(confirmer) confirmer
	// holds, when set, returns the hold declarer, given the real one.
	holds func(holdDeclarer) holdDeclarer
}

// newProducer builds a producer over c, which Close closes; set nil means
// undeclared. It declares nothing itself: the conn's onConnect (declareSet,
// declare.go) does. It does no I/O: channels are opened on first use.
func newProducer(c *conn, set *QueueSet, prefix string, opts *ProducerOptions, s *seams) *Producer {
	o := opts.resolved()
	p := &Producer{
		conn:    c,
		opts:    o,
		prefix:  prefix,
		pool:    make(chan confirmer, o.Channels*o.PublishesPerChannel),
		closing: make(chan struct{}),
		enqueue: chainProducer(o.Middleware),
	}
	if s == nil {
		s = &seams{}
	}
	p.declarations = newHoldDeclarations(c, p.closing, o.Channels)
	p.holds = p.declarations
	if s.holds != nil {
		p.holds = s.holds(p.declarations)
	}
	channels := make([]confirmer, o.Channels)
	for i := range channels {
		channels[i] = newChannelConfirmer(c, p.closing)
		if s.confirmer != nil {
			channels[i] = s.confirmer(channels[i])
		}
	}
	for range o.PublishesPerChannel {
		for _, cf := range channels {
			p.pool <- cf
		}
	}
	if set != nil {
		p.queues = make(map[string]topology.Queue, len(set.Queues))
		p.diverts = make(map[string]*divertCache, 2*len(set.Queues))
		for _, q := range set.Queues {
			work := set.WorkQueue(q.Name)
			p.queues[work] = q.topology()
			p.diverts[work] = newDivertCache(work)
			dead := topology.DeadName(work)
			p.diverts[dead] = newDivertCache(dead)
		}
	}
	return p
}

func (o ProducerOptions) validate() error {
	for _, g := range []struct {
		name string
		d    time.Duration
	}{{"delay granularity", o.DelayGranularity}, {"defer granularity", o.DeferGranularity}} {
		if g.d <= 0 || g.d%time.Millisecond != 0 {
			return fmt.Errorf("queuey: %s %s must be a positive whole number of milliseconds", g.name, g.d)
		}
		if g.d.Milliseconds() > topology.MaxHoldTTL {
			return fmt.Errorf("queuey: %s %s is longer than a hold queue can wait (%s)", g.name, topology.FormatDuration(g.d),
				topology.FormatDuration(time.Duration(topology.MaxHoldTTL)*time.Millisecond))
		}
	}
	return nil
}

// Enqueue publishes a job of type jobType onto queue (a logical name), to be
// handled as soon as a worker takes it, and returns its id. The payload is
// encoded with encoding/json; pass a json.RawMessage to send JSON as it is.
// The job goes in at priority 0, behind deferred jobs. Enqueue returns once
// the broker has confirmed the job; a queue that does not exist is an error
// (ErrUnroutable). A job type, correlation id or queue name longer than 255
// bytes is refused with ErrFieldTooLong before anything is sent.
func (p *Producer) Enqueue(ctx context.Context, queue, jobType string, payload any, opts *EnqueueOptions) (string, error) {
	if err := p.checkShortStrings(queue, jobType, opts); err != nil {
		return "", err
	}
	env, err := p.newEnvelope(queue, jobType, payload, opts)
	if err != nil {
		return "", err
	}
	if err := p.enqueueOne(ctx, queue, env, 0, false); err != nil {
		return "", err
	}
	return env.JobID, nil
}

// enqueueOne publishes a new job's envelope, held for ttl ms when ttl > 0,
// through the producer's middleware.
func (p *Producer) enqueueOne(ctx context.Context, queue string, env Envelope, ttl int64, deferred bool) error {
	if p.enqueue == nil {
		return p.publishEnvelope(ctx, env, ttl)
	}
	job := outgoingJob(queue, env, ttl, deferred)
	call := &EnqueueCall{Jobs: []*OutgoingJob{job}}
	call.publish = func(ctx context.Context) error { return p.publishEnvelopeWith(ctx, env, ttl, job.Headers) }
	return p.enqueue(ctx, call)
}

// outgoingJob is how middleware sees a new job's envelope.
func outgoingJob(queue string, env Envelope, ttl int64, deferred bool) *OutgoingJob {
	return &OutgoingJob{ID: env.JobID, Type: env.JobType, Queue: queue, WorkQueue: env.Queue, CorrelationID: env.CorrelationID,
		Delay: time.Duration(ttl) * time.Millisecond, Deferred: deferred}
}

// EnqueueAfter publishes a job that a worker can take once delay has passed,
// and returns its id. A delay of zero or less (time.Until of a time just
// past) enqueues the job now, as Enqueue does. A positive delay is rounded up
// to the producer's DelayGranularity, at least one step, and waits in a hold queue that the
// broker returns the job from at priority 0. A delay longer than a hold queue
// can carry (24d 20h 31m 23s) is refused with ErrDelayTooLong, never
// shortened, and nothing is published. The queue must be one this producer
// declared, else ErrUnknownQueue.
//
// A hold queue deletes itself, with what it holds, twice its TTL after it
// was last declared, and a publish into it does not count. So when the
// broker confirms the job later than one delay step after the hold queue's
// declaration (a stall: flow control, an overloaded broker), EnqueueAfter
// declares the queue again before it returns, and if even that comes
// after the queue may have expired, it sends the job again: the job may
// then be enqueued twice, never lost. A job that finds the hold queue
// already expired (it waited twice the delay step for a channel) is
// returned by the broker, and sent again with a new declaration. If it
// cannot be sure, it returns an error that says the job may or may not
// have been enqueued.
func (p *Producer) EnqueueAfter(ctx context.Context, queue, jobType string, payload any, delay time.Duration, opts *EnqueueOptions) (string, error) {
	if delay <= 0 {
		// A time just past (time.Until of it) is an ordinary call.
		return p.Enqueue(ctx, queue, jobType, payload, opts)
	}
	if err := p.checkShortStrings(queue, jobType, opts); err != nil {
		return "", err
	}
	return p.enqueueHeld(ctx, queue, jobType, payload, delay, p.opts.DelayGranularity, false, opts)
}

// Defer publishes a job that comes back after delay ahead of the backlog:
// once its hold queue returns it, it has the queue's max priority (RabbitMQ
// delivers higher priorities first), for that one round; on a queue without
// priorities it simply comes back at the end. Its envelope says deferrals 0,
// as the original queuey's does: a deferral is counted when a handler
// defers. The delay is rounded up to the producer's DeferGranularity; a delay
// of zero or less waits one step, as a handler's JobDefer does. Otherwise
// Defer is like EnqueueAfter.
func (p *Producer) Defer(ctx context.Context, queue, jobType string, payload any, delay time.Duration, opts *EnqueueOptions) (string, error) {
	if delay < 0 {
		delay = 0 // one step, as JobDefer
	}
	if err := p.checkShortStrings(queue, jobType, opts); err != nil {
		return "", err
	}
	return p.enqueueHeld(ctx, queue, jobType, payload, delay, p.opts.DeferGranularity, true, opts)
}

func (p *Producer) enqueueHeld(ctx context.Context, queue, jobType string, payload any, delay, granularity time.Duration, deferred bool, opts *EnqueueOptions) (string, error) {
	work := p.workName(queue)
	q, known := p.queueConfig(work)
	if !known {
		return "", unknownQueue(work)
	}
	ttl, err := topology.HoldTTL(delay, granularity)
	if err != nil {
		return "", err
	}
	env, err := p.newEnvelope(queue, jobType, payload, opts)
	if err != nil {
		return "", err
	}
	if deferred {
		// A deferral is counted when a handler defers, as the original
		// queuey counts it: a job the producer defers has been deferred
		// by no one yet.
		env.Priority = topology.DeferPriority(q)
	}
	if err := p.enqueueOne(ctx, queue, env, ttl, deferred); err != nil {
		return "", err
	}
	return env.JobID, nil
}

// BatchJob is one job of an EnqueueBatch.
type BatchJob struct {
	// JobType is the job's stable kind.
	JobType string
	// Options are the job's options. Defaults to none.
	Options *EnqueueOptions
	// Payload is encoded with encoding/json.
	Payload any
	// Queue is the logical name of the queue.
	Queue string
}

// BatchError reports the jobs of a batch that were not enqueued.
type BatchError struct {
	// Errs has one entry per job of the batch, in order: nil for a job the
	// broker confirmed, the reason for one it did not.
	Errs []error
}

func (e *BatchError) Error() string {
	failed, first := 0, -1
	for i, err := range e.Errs {
		if err != nil {
			failed++
			if first < 0 {
				first = i
			}
		}
	}
	return fmt.Sprintf("queuey: %d of %d jobs of the batch were not enqueued; job %d: %v", failed, len(e.Errs), first, e.Errs[first])
}

// Unwrap lets errors.Is and errors.As see every job's error.
func (e *BatchError) Unwrap() []error {
	var errs []error
	for _, err := range e.Errs {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// EnqueueBatch enqueues jobs like Enqueue, pipelined: the batch goes out in
// chunks of 128 jobs, each written to one channel before the producer waits
// for its confirms, with ProducerOptions.BatchChunks chunks (8 by default)
// in flight at once on channels of their own. The jobs of a chunk arrive in
// batch order, and the chunks interleave; with BatchChunks 1 the jobs of
// one queue usually arrive in batch order, but even then a job sent again
// (its channel closed before its confirm, it was confirmed too late after
// a divert probe, its queue was absent for a moment) arrives after the
// ones sent after it, and jobs diverted during a migration come back
// behind the queue's backlog. It returns one id per job. If a job
// cannot be encoded, nothing is published. If the broker refuses some jobs,
// the others are still enqueued and the error is a *BatchError saying which.
func (p *Producer) EnqueueBatch(ctx context.Context, jobs []BatchJob) ([]string, error) {
	ids := make([]string, len(jobs))
	envs := make([]Envelope, len(jobs))
	for i, j := range jobs {
		if err := p.checkShortStrings(j.Queue, j.JobType, j.Options); err != nil {
			return nil, fmt.Errorf("queuey: batch job %d: %w", i, err)
		}
		env, err := p.newEnvelope(j.Queue, j.JobType, j.Payload, j.Options)
		if err != nil {
			return nil, fmt.Errorf("queuey: batch job %d: %w", i, err)
		}
		ids[i], envs[i] = env.JobID, env
	}
	if p.enqueue == nil {
		return ids, p.publishBatch(ctx, envs, nil)
	}
	call := &EnqueueCall{Batch: true, Jobs: make([]*OutgoingJob, len(jobs))}
	for i, env := range envs {
		call.Jobs[i] = outgoingJob(jobs[i].Queue, env, 0, false)
	}
	call.publish = func(ctx context.Context) error { return p.publishBatch(ctx, envs, call.Jobs) }
	return ids, p.enqueue(ctx, call)
}

// publishBatch publishes a batch's envelopes, with the headers of its
// outgoing jobs when there are any, and returns nil or a *BatchError.
func (p *Producer) publishBatch(ctx context.Context, envs []Envelope, jobs []*OutgoingJob) error {
	out := make([]*delivery, len(envs))
	for i, env := range envs {
		var headers amqp.Table
		if jobs != nil {
			headers = jobs[i].Headers
		}
		msg, err := newPublishing(env, persistent(p.queueConfig(env.Queue)), headers)
		if err != nil {
			return fmt.Errorf("queuey: batch job %d: %w", i, err)
		}
		out[i] = p.deliveryTo(env.Queue, msg)
	}
	if err := p.begin(); err != nil {
		return err
	}
	defer p.end()
	p.deliverChunks(ctx, out)
	errs := make([]error, len(envs))
	failed := false
	for i, d := range out {
		errs[i] = d.err
		failed = failed || d.err != nil
	}
	if failed {
		return &BatchError{Errs: errs}
	}
	return nil
}

// deliverChunks delivers out in chunks of maxChunk, up to
// opts.BatchChunks of them at once: each deliver takes its own turn from
// the pool, whose turns go round the channels, so chunks in flight
// together are on distinct channels while there are free ones.
func (p *Producer) deliverChunks(ctx context.Context, out []*delivery) {
	if p.opts.BatchChunks <= 1 || len(out) <= maxChunk {
		for start := 0; start < len(out); start += maxChunk {
			p.deliver(ctx, out[start:min(start+maxChunk, len(out))])
		}
		return
	}
	turns := make(chan struct{}, p.opts.BatchChunks)
	var wg sync.WaitGroup
	for start := 0; start < len(out); start += maxChunk {
		turns <- struct{}{}
		chunk := out[start:min(start+maxChunk, len(out))]
		wg.Go(func() {
			defer func() { <-turns }()
			p.deliver(ctx, chunk)
		})
	}
	wg.Wait()
}

// ProducerStats are a producer's counters since it was built: the costs of
// its guarantees, which an ordinary publish does not pay.
type ProducerStats struct {
	// DivertProbes is how many divert probes the producer sent: one per
	// work or dead-letter queue every divert.Recheck while it publishes to
	// it (see Producer).
	DivertProbes int64
	// LateConfirms is how many jobs were confirmed so long after the probe
	// that routed them that they were sent again (a duplicate, never a
	// loss).
	LateConfirms int64
	// HoldRenewals is how many hold queues were declared again because a
	// held job's confirm came later than one delay step after the
	// declaration.
	HoldRenewals int64
	// HoldResends is how many held jobs were sent again because their hold
	// queue may have expired with them, or had before they arrived.
	HoldResends int64
}

// Stats returns the producer's counters; safe to call at any time.
func (p *Producer) Stats() ProducerStats {
	return ProducerStats{
		DivertProbes: p.probesSent.Load(),
		LateConfirms: p.lateConfirms.Load(),
		HoldRenewals: p.heldRenewals.Load(),
		HoldResends:  p.heldResends.Load(),
	}
}

// Close waits for the publishes in flight, then closes the producer's
// channels and its connection. A publish that is waiting for a lost
// connection to come back does not keep Close waiting: it fails with
// ErrClosed. Publishing after Close, and Close again, return ErrClosed.
func (p *Producer) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closed = true
	close(p.closing)
	p.mu.Unlock()
	p.waitInflight()

	for range cap(p.pool) {
		(<-p.pool).discard()
	}
	p.declarations.close()
	if err := p.conn.close(); err != nil && !errors.Is(err, ErrClosed) {
		return err
	}
	return nil
}

// waitInflight waits for the publishes in flight. Those waiting for a
// blocked connection to be unblocked end when Close begins; those that
// wrote their job just as the block began wait for a confirm the blocked
// broker will not send until it is unblocked, so while the connection is
// blocked it is dropped, which settles them as lost with it ("may or may
// not have been enqueued") and makes Close return.
func (p *Producer) waitInflight() {
	done := make(chan struct{})
	go func() {
		p.inflight.Wait()
		close(done)
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if b, blocked := p.conn.block(); blocked {
				p.droppedBlocked.Store(&b)
				_ = p.conn.close()
			}
		}
	}
}

// begin registers a publish in flight, or refuses it once Close has begun.
func (p *Producer) begin() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	p.inflight.Add(1)
	return nil
}

func (p *Producer) end() { p.inflight.Done() }

// workName is the broker name of logical queue name.
func (p *Producer) workName(name string) string {
	if p.prefix == "" {
		return name
	}
	return topology.WorkName(p.prefix, name)
}

// workNameLen is len(p.workName(name)), without building it.
func (p *Producer) workNameLen(name string) int {
	if p.prefix == "" {
		return len(name)
	}
	return len(p.prefix) + 1 + len(name)
}

// newEnvelope builds the envelope of a new job at attempt 1, priority 0.
func (p *Producer) newEnvelope(queue, jobType string, payload any, opts *EnqueueOptions) (Envelope, error) {
	if strings.TrimSpace(queue) == "" {
		return Envelope{}, errors.New("queuey: the queue name is empty")
	}
	if jobType == "" {
		return Envelope{}, errors.New("queuey: the job type is empty: workers route jobs by it")
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return Envelope{}, fmt.Errorf("queuey: encode the payload of a %q job: %w", jobType, err)
	}
	return Envelope{
		JobID:         jobutil.NewID(),
		JobType:       jobType,
		Queue:         p.workName(queue),
		Attempt:       1,
		EnqueuedAtMs:  time.Now().UnixMilli(),
		CorrelationID: opts.correlationID(),
		Payload:       body,
	}, nil
}
