package queuey

// Dead letters: list, replay and purge what a queue set's dead-letter
// queues hold.
//
// Every operation browses a dead-letter queue the same way: basic.consume
// with manual acknowledgements and a prefetch as large as the queue was
// when the browse began, reading deliveries in queue order. A dead letter the
// operation leaves alone stays unacknowledged until the browse ends, then is
// given back with one basic.nack (requeue) and returns to its place; one it
// removes is acknowledged. Nothing uses basic.get, whose requeues reorder a
// queue, or auto-ack, which would lose what a killed process had read.
//
// A replay publishes each dead letter into its work queue through a
// producer of the set (mandatory, publisher confirms, diverted during a
// migration like any publish), and acknowledges the dead letter only once the
// broker confirmed the copy. A replay that dies halfway leaves every dead
// letter it had not yet seen confirmed where it was: run again, it replays
// those, and at worst a job twice.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// browseIdle is how long a browse waits for the next delivery before it
// asks the broker whether any is left for it: the messages the queue held
// when the browse began may have gone to another consumer meanwhile.
const browseIdle = 250 * time.Millisecond

// maxBrowsePrefetch is the largest prefetch AMQP can express; a browse of a
// longer queue asks for no limit.
const maxBrowsePrefetch = math.MaxUint16

// DeadLetterInfo describes one dead letter as List reads it.
type DeadLetterInfo struct {
	// Position is the dead letter's 0-based place in its queue when it was
	// read.
	Position int `json:"position"`
	// Queue is the logical queue it died on.
	Queue string `json:"queue"`
	// JobID is the job's id; for a malformed dead letter, its AMQP
	// message_id, when it has one.
	JobID string `json:"job_id,omitempty"`
	// Kind is the job type; empty for a malformed dead letter.
	Kind string `json:"kind,omitempty"`
	// Reason is its x-death-reason header.
	Reason string `json:"reason"`
	// Attempts is how many attempts it had (x-attempts).
	Attempts int `json:"attempts"`
	// DeadAt is when it was dead-lettered; zero when unknown (a dead letter
	// from before the runtime wrote x-queuey-dead-lettered-at, or from the
	// original queuey).
	DeadAt time.Time `json:"dead_lettered_at,omitzero"`
	// EnqueuedAt is when the job was first enqueued; zero for a malformed
	// dead letter.
	EnqueuedAt time.Time `json:"enqueued_at,omitzero"`
	// CorrelationID is the job's correlation id, when it has one.
	CorrelationID string `json:"correlation_id,omitempty"`
	// Malformed says the body is not a queuey envelope; MalformedError says
	// why.
	Malformed      bool   `json:"malformed,omitempty"`
	MalformedError string `json:"malformed_error,omitempty"`
	// Payload is the job's arguments; nil for a malformed dead letter, whose
	// bytes are in Body.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Body is the message body as it is in the queue.
	Body []byte `json:"-"`
}

// Age is how long ago the dead letter died, measured from DeadAt, or from
// when the job was enqueued when that is unknown; 0 when neither is known.
func (d DeadLetterInfo) Age(now time.Time) time.Duration {
	switch {
	case !d.DeadAt.IsZero():
		return now.Sub(d.DeadAt)
	case !d.EnqueuedAt.IsZero():
		return now.Sub(d.EnqueuedAt)
	}
	return 0
}

// DeadFilter selects dead letters. Its zero value selects every one; each
// field that is set narrows the selection, and a dead letter must pass all
// of them.
type DeadFilter struct {
	// Kinds keeps the dead letters of these job types. A malformed dead
	// letter has no kind, so a filter by kind never selects one.
	Kinds []string
	// Reasons keeps the dead letters whose reason contains one of these
	// (case-sensitive), such as "exhausted" or "fatal error".
	Reasons []string
	// IDs keeps the dead letters of these job ids.
	IDs []string
	// OlderThan keeps the dead letters older than this (see
	// DeadLetterInfo.Age). A dead letter of unknown age passes.
	OlderThan time.Duration
}

// Validate reports a filter that cannot select anything meaningful.
func (f DeadFilter) Validate() error {
	if f.OlderThan < 0 {
		return fmt.Errorf("queuey: dead-letter filter: age %s is negative: give a positive duration such as 1h", f.OlderThan)
	}
	for _, r := range f.Reasons {
		if r == "" {
			return errors.New("queuey: dead-letter filter: an empty reason matches everything: leave the reason out instead")
		}
	}
	return nil
}

// matches reports whether d passes f at now.
func (f DeadFilter) matches(d DeadLetterInfo, now time.Time) bool {
	if len(f.Kinds) > 0 && (d.Malformed || !slices.Contains(f.Kinds, d.Kind)) {
		return false
	}
	if len(f.IDs) > 0 && !slices.Contains(f.IDs, d.JobID) {
		return false
	}
	if len(f.Reasons) > 0 && !slices.ContainsFunc(f.Reasons, func(r string) bool { return strings.Contains(d.Reason, r) }) {
		return false
	}
	if f.OlderThan > 0 {
		if age := d.Age(now); age != 0 && age < f.OlderThan {
			return false
		}
	}
	return true
}

// ListOptions bound a List.
type ListOptions struct {
	Filter DeadFilter
	// Cursor is where to start: "" for the head of the queue, else the
	// NextCursor of the page before.
	Cursor string
	// Limit is how many dead letters a page holds at most. Defaults to 100.
	Limit int
}

// DeadPage is one page of a List.
type DeadPage struct {
	Letters []DeadLetterInfo `json:"dead_letters"`
	// Total is how many messages the dead-letter queue held (ready) when the
	// page was read.
	Total int `json:"total"`
	// NextCursor continues the listing; "" when the queue was read to its
	// end. Positions shift when dead letters are replayed or purged in
	// between.
	NextCursor string `json:"next_cursor,omitempty"`
}

// ReplayOptions select what Replay replays and how.
type ReplayOptions struct {
	Filter DeadFilter
	// ResetAttempts replays each job as attempt 1, with its retries ahead
	// of it again. Otherwise it keeps the attempt it died on.
	ResetAttempts bool
	// Malformed also replays the dead letters that are not envelopes, byte
	// for byte with their properties, into the work queue. Without it
	// they stay where they are.
	Malformed bool
	// Limit stops after this many replays; 0 replays every match.
	Limit int
	// Progress, when set, is called after each chunk of replays is
	// confirmed, with the dead letters replayed so far and the queue's
	// length when the replay began.
	Progress func(replayed, total int)
}

// ReplayResult counts what a Replay or Purge did.
type ReplayResult struct {
	// Seen is how many dead letters were read.
	Seen int `json:"seen"`
	// Done is how many were replayed (or purged).
	Done int `json:"done"`
	// SkippedMalformed is how many matched but were left because they are
	// not envelopes and ReplayOptions.Malformed was not set.
	SkippedMalformed int `json:"skipped_malformed,omitempty"`
}

// DeadLetters reads and replays the dead letters of one queue set.
type DeadLetters struct {
	ac   *amqp.Connection
	pub  *Producer
	set  QueueSet
	logs map[string]string // logical name by dead-letter queue
	// idle overrides browseIdle in tests.
	idle time.Duration
}

// OpenDeadLetters connects to the broker at url for the dead letters of set
// (to the first of its hosts that answers, when it lists several, as
// NewProducer's url may).
// It declares the set as a producer does, so set must match the queues that
// exist (a *PreconditionError says where it does not): build it from the
// Terraform resource's runtime_config (LoadQueueSet) to be sure.
func OpenDeadLetters(ctx context.Context, url string, set QueueSet) (*DeadLetters, error) {
	if err := set.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ac, err := dialAny(ctx, url)
	if err != nil {
		return nil, err
	}
	pub, err := NewProducerFromConnection(ctx, ac, set, nil)
	if err != nil {
		_ = ac.Close()
		return nil, err
	}
	d := &DeadLetters{ac: ac, pub: pub, set: set, logs: map[string]string{}, idle: browseIdle}
	for _, q := range set.Queues {
		d.logs[set.DeadQueue(q.Name)] = q.Name
	}
	return d, nil
}

// Close closes the connection.
func (d *DeadLetters) Close() error {
	err := d.pub.Close()
	if cerr := d.ac.Close(); err == nil && !errors.Is(cerr, amqp.ErrClosed) {
		err = cerr
	}
	return err
}

// deadQueue resolves a logical queue name to its dead-letter queue.
func (d *DeadLetters) deadQueue(queue string) (string, error) {
	for _, q := range d.set.Queues {
		if q.Name == queue {
			return d.set.DeadQueue(q.Name), nil
		}
	}
	names := make([]string, len(d.set.Queues))
	for i, q := range d.set.Queues {
		names[i] = q.Name
	}
	return "", fmt.Errorf("queuey: queue %q is not in set %q: use one of %s", queue, d.set.Prefix, strings.Join(names, ", "))
}

// List reads a page of the dead letters of logical queue queue, leaving
// every one where it was.
func (d *DeadLetters) List(ctx context.Context, queue string, opts ListOptions) (DeadPage, error) {
	if err := opts.Filter.Validate(); err != nil {
		return DeadPage{}, err
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = 100
	}
	start := 0
	if opts.Cursor != "" {
		n, err := strconv.Atoi(opts.Cursor)
		if err != nil || n < 0 {
			return DeadPage{}, fmt.Errorf("queuey: cursor %q is not one a listing returned: pass the next_cursor of the page before, or none to start at the head", opts.Cursor)
		}
		start = n
	}
	dead, err := d.deadQueue(queue)
	if err != nil {
		return DeadPage{}, err
	}
	var page DeadPage
	now := time.Now()
	total, err := d.browse(ctx, dead, func(b *browsing, del amqp.Delivery) (bool, error) {
		pos := b.seen - 1
		if pos < start {
			return true, nil
		}
		info := describe(queue, pos, del)
		if !opts.Filter.matches(info, now) {
			return true, nil
		}
		if len(page.Letters) == limit {
			page.NextCursor = strconv.Itoa(pos)
			return false, nil
		}
		page.Letters = append(page.Letters, info)
		return true, nil
	})
	page.Total = total
	return page, err
}

// Replay publishes the dead letters of logical queue queue that opts
// selects into its work queue, with the same job id, and removes each once
// the broker confirmed its copy. The others stay where they were.
func (d *DeadLetters) Replay(ctx context.Context, queue string, opts ReplayOptions) (ReplayResult, error) {
	if err := opts.Filter.Validate(); err != nil {
		return ReplayResult{}, err
	}
	dead, err := d.deadQueue(queue)
	if err != nil {
		return ReplayResult{}, err
	}
	work := d.set.WorkQueue(queue)
	var res ReplayResult
	var chunk []replaying
	ids := map[string]bool{}
	now := time.Now()
	var b *browsing
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		err := d.replayChunk(ctx, chunk)
		for _, r := range chunk {
			if r.out.err == nil {
				if aerr := b.ack(r.del); aerr != nil && err == nil {
					err = fmt.Errorf("queuey: replayed job %s, but could not remove its dead letter, which will be replayed again next time: %w", r.info.JobID, aerr)
				} else {
					res.Done++
				}
			}
		}
		chunk = chunk[:0]
		clear(ids)
		if opts.Progress != nil {
			opts.Progress(res.Done, b.total)
		}
		return err
	}
	_, err = d.browse(ctx, dead, func(br *browsing, del amqp.Delivery) (bool, error) {
		b = br
		res.Seen = b.seen
		info := describe(queue, b.seen-1, del)
		if !opts.Filter.matches(info, now) {
			return true, nil
		}
		if info.Malformed && !opts.Malformed {
			res.SkippedMalformed++
			return true, nil
		}
		if opts.Limit > 0 && res.Done+len(chunk) >= opts.Limit {
			return false, nil
		}
		msg, err := replayPublishing(info, del, work, d.pub, opts.ResetAttempts)
		if err != nil {
			return false, err
		}
		// A chunk's messages need distinct ids (see deliver).
		if ids[msg.MessageId] {
			if err := flush(); err != nil {
				return false, err
			}
		}
		ids[msg.MessageId] = true
		chunk = append(chunk, replaying{info: info, del: del, out: d.pub.deliveryTo(work, msg)})
		if len(chunk) == maxChunk {
			if err := flush(); err != nil {
				return false, err
			}
		}
		return true, nil
	}, flush)
	return res, err
}

// Purge removes the dead letters of logical queue queue that f selects,
// malformed ones included. The others stay where they were.
func (d *DeadLetters) Purge(ctx context.Context, queue string, f DeadFilter) (ReplayResult, error) {
	if err := f.Validate(); err != nil {
		return ReplayResult{}, err
	}
	dead, err := d.deadQueue(queue)
	if err != nil {
		return ReplayResult{}, err
	}
	var res ReplayResult
	now := time.Now()
	_, err = d.browse(ctx, dead, func(b *browsing, del amqp.Delivery) (bool, error) {
		res.Seen = b.seen
		if !f.matches(describe(queue, b.seen-1, del), now) {
			return true, nil
		}
		if err := b.ack(del); err != nil {
			return false, fmt.Errorf("queuey: purge a dead letter of %s: %w", dead, err)
		}
		res.Done++
		return true, nil
	})
	return res, err
}

// replaying is one dead letter of a replay chunk.
type replaying struct {
	info DeadLetterInfo
	del  amqp.Delivery
	out  *delivery
}

// replayChunk publishes a chunk through the producer's delivery loop and
// returns the first failure.
func (d *DeadLetters) replayChunk(ctx context.Context, chunk []replaying) error {
	if err := d.pub.begin(); err != nil {
		return err
	}
	defer d.pub.end()
	ds := make([]*delivery, len(chunk))
	for i, r := range chunk {
		ds[i] = r.out
	}
	d.pub.deliver(ctx, ds)
	for _, r := range chunk {
		if r.out.err != nil {
			return fmt.Errorf("queuey: replay job %s into %s (its dead letter stays): %w", r.info.JobID, r.out.key, r.out.err)
		}
	}
	return nil
}

// replayPublishing is the message that replays del: for an envelope, the
// job as a new publish would carry it (priority 0, the same id, attempt 1
// when reset), with the dead letter's own headers carried over; for a
// malformed dead letter, its body and properties as they are.
func replayPublishing(info DeadLetterInfo, del amqp.Delivery, work string, p *Producer, reset bool) (amqp.Publishing, error) {
	headers := withoutDeadLetterHeaders(del.Headers)
	if info.Malformed {
		return amqp.Publishing{
			Headers:         stripDeathHeaders(headers),
			ContentType:     del.ContentType,
			ContentEncoding: del.ContentEncoding,
			DeliveryMode:    del.DeliveryMode,
			Priority:        del.Priority,
			CorrelationId:   del.CorrelationId,
			ReplyTo:         del.ReplyTo,
			MessageId:       del.MessageId,
			Timestamp:       del.Timestamp,
			Type:            del.Type,
			AppId:           del.AppId,
			Body:            del.Body,
		}, nil
	}
	env, _ := decodeEnvelope(del.Body) // describe decoded it
	env.Queue = work
	env.Priority = 0
	if reset {
		env.Attempt = 1
	}
	delete(headers, topology.HeaderReadyAt)
	return newPublishing(env, persistent(p.queueConfig(work)), headers)
}

// describe reads del, the dead letter at pos of logical queue queue.
func describe(queue string, pos int, del amqp.Delivery) DeadLetterInfo {
	info := DeadLetterInfo{
		Position: pos,
		Queue:    queue,
		Body:     del.Body,
		Attempts: headerInt(del.Headers, topology.HeaderAttempts),
	}
	info.Reason, _ = del.Headers[topology.HeaderDeathReason].(string)
	if ms := headerInt(del.Headers, topology.HeaderDeadLetteredAt); ms > 0 {
		info.DeadAt = time.UnixMilli(int64(ms))
	}
	env, err := decodeEnvelope(del.Body)
	if err != nil {
		info.Malformed = true
		info.MalformedError = err.Error()
		info.JobID = del.MessageId
		info.CorrelationID = del.CorrelationId
		return info
	}
	info.JobID = env.JobID
	info.Kind = env.JobType
	info.CorrelationID = env.CorrelationID
	info.EnqueuedAt = time.UnixMilli(env.EnqueuedAtMs)
	info.Payload = env.Payload
	if info.Attempts == 0 {
		info.Attempts = env.Attempt
	}
	return info
}

// browsing is the state of one browse, for its visitor.
type browsing struct {
	// total is how many messages the queue held (ready) when the browse
	// began; seen how many have been read, the current one included.
	total, seen int
	// acked is how many of them were removed.
	acked int
}

// ack removes del from the queue.
func (b *browsing) ack(del amqp.Delivery) error {
	if err := del.Ack(false); err != nil {
		return err
	}
	b.acked++
	return nil
}

// requeueSettle bounds how long a browse waits, after giving its dead
// letters back, for the queue to count them ready again.
const requeueSettle = 5 * time.Second

// browse reads queue in order with a consumer of its own, calling visit
// for each delivery until visit returns false, an error, or the messages
// the queue held at the start are read. A visitor that acknowledges a
// delivery removes it; every delivery it leaves unacknowledged is given back
// in place when the browse ends. Each of after runs (in order) before that,
// with the deliveries still held: a replay publishes its last chunk there.
// It returns how many messages the queue held at the start.
func (d *DeadLetters) browse(ctx context.Context, queue string, visit func(*browsing, amqp.Delivery) (bool, error), after ...func() error) (int, error) {
	ch, err := d.ac.Channel()
	if err != nil {
		return 0, fmt.Errorf("queuey: open a channel to read %s: %w", queue, err)
	}
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("queuey: read %s: %w", queue, err)
	}
	b := &browsing{total: q.Messages}
	if b.total == 0 {
		return 0, nil
	}
	prefetch := b.total
	if prefetch > maxBrowsePrefetch {
		prefetch = 0 // no limit
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return b.total, fmt.Errorf("queuey: set the prefetch to read %s: %w", queue, err)
	}
	tag := "queuey-browse-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	deliveries, err := ch.ConsumeWithContext(ctx, queue, tag, false, false, false, false, nil)
	if err != nil {
		return b.total, fmt.Errorf("queuey: read %s: %w", queue, err)
	}
	var verr error
	quiet := 0
	idle := time.NewTimer(d.idle)
	defer idle.Stop()
read:
	for b.seen < b.total {
		idle.Reset(d.idle)
		select {
		case <-ctx.Done():
			verr = ctx.Err()
			break read
		case <-idle.C:
			// Nothing for a while. A broker under load can pause for
			// seconds; the browse ends only when the queue has no
			// ready message left for it, twice in a row: the rest went
			// to another consumer. A declare-ok comes after every
			// delivery the queue sent before it, so a second quiet
			// round has read them all.
			q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			if err != nil {
				verr = fmt.Errorf("queuey: read %s: %w", queue, err)
				break read
			}
			if q.Messages > 0 {
				quiet = 0
				continue
			}
			if quiet++; quiet == 2 {
				break read
			}
		case del, ok := <-deliveries:
			if !ok {
				verr = fmt.Errorf("queuey: the channel reading %s closed; what was read and not removed goes back to the queue", queue)
				break read
			}
			b.seen++
			quiet = 0
			more, err := visit(b, del)
			if err != nil {
				verr = err
				break read
			}
			if !more {
				break read
			}
		}
	}
	for _, f := range after {
		if err := f(); err != nil && verr == nil {
			verr = err
		}
	}
	// Stop the consumer first: after cancel-ok nothing more is delivered.
	// Then give back everything left unacknowledged, in place: the
	// deliveries read and left, and those the broker sent that were never
	// read (delivery tag 0 with multiple is every outstanding one).
	if err := ch.Cancel(tag, false); err != nil && verr == nil {
		verr = fmt.Errorf("queuey: stop reading %s: %w", queue, err)
	}
	if err := ch.Nack(0, true, true); err != nil && verr == nil {
		verr = fmt.Errorf("queuey: give back the dead letters read from %s (closing the channel gives them back too): %w", queue, err)
	}
	// basic.nack has no reply. On a classic queue a synchronous call on
	// the same channel returns only after the queue took the requeue, so
	// that what runs next (a listing after a replay) sees the dead letters
	// back in place. A quorum queue applies the requeue through its log,
	// after the call can return: there the browse waits until the queue
	// counts ready at least what it held less what was removed (measured
	// on 3.10.8 without the wait: the 16th of back-to-back listings found
	// the queue empty), for requeueSettle at most, since another consumer
	// may take them meanwhile.
	deadline := time.Now().Add(requeueSettle)
	for {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			if verr == nil {
				verr = fmt.Errorf("queuey: read %s after giving its dead letters back: %w", queue, err)
			}
			break
		}
		if q.Messages >= b.total-b.acked || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return b.total, verr
}
