package queueytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/internal/jobutil"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// Enqueued is one job a Producer recorded.
type Enqueued struct {
	// CorrelationID is the option the job was enqueued with.
	CorrelationID string
	// Deferred says the job was enqueued with Defer (it comes back at the
	// queue's max priority).
	Deferred bool
	// Delay is the delay of EnqueueAfter or Defer; zero for Enqueue.
	Delay time.Duration
	// ID is the id the producer returned.
	ID string
	// JobType is the job's kind.
	JobType string
	// Payload is the payload as JSON, as it would have been sent.
	Payload json.RawMessage
	// Queue is the logical queue name.
	Queue string
}

// Producer is a queuey.Enqueuer that records jobs instead of publishing
// them. It is safe for concurrent use. The zero value is ready to use.
type Producer struct {
	// Err, when set, is returned by every enqueue, and nothing is recorded:
	// for testing how code handles a broker that refuses a job.
	Err error

	mu   sync.Mutex
	jobs []Enqueued
}

var _ queuey.Enqueuer = (*Producer)(nil)

// NewProducer returns an empty recording producer.
func NewProducer() *Producer { return &Producer{} }

// Enqueue records a job to be handled now.
func (p *Producer) Enqueue(ctx context.Context, queue, jobType string, payload any, opts *queuey.EnqueueOptions) (string, error) {
	return p.record(ctx, queue, jobType, payload, 0, false, false, opts)
}

// EnqueueAfter records a job to be handled after delay.
func (p *Producer) EnqueueAfter(ctx context.Context, queue, jobType string, payload any, delay time.Duration, opts *queuey.EnqueueOptions) (string, error) {
	return p.record(ctx, queue, jobType, payload, delay, true, false, opts)
}

// Defer records a job deferred by delay.
func (p *Producer) Defer(ctx context.Context, queue, jobType string, payload any, delay time.Duration, opts *queuey.EnqueueOptions) (string, error) {
	return p.record(ctx, queue, jobType, payload, delay, true, true, opts)
}

// record checks what the real producer checks before it publishes, and keeps
// the job. A held job (EnqueueAfter, Defer) has its delay checked as the
// real producer does with its default granularity, so a delay longer than a
// hold queue can wait is refused here too.
func (p *Producer) record(ctx context.Context, queue, jobType string, payload any, delay time.Duration, held, deferred bool, opts *queuey.EnqueueOptions) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if p.Err != nil {
		return "", p.Err
	}
	switch {
	case queue == "":
		return "", errors.New("queueytest: the queue name is empty")
	case jobType == "":
		return "", errors.New("queueytest: the job type is empty: workers route jobs by it")
	}
	if held {
		if _, err := topology.HoldTTL(delay, topology.DefaultGranularity); err != nil {
			return "", err
		}
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return "", fmt.Errorf("queueytest: encode the payload of a %q job: %w", jobType, err)
	}
	e := Enqueued{Deferred: deferred, Delay: delay, ID: jobutil.NewID(), JobType: jobType, Payload: body, Queue: queue}
	if opts != nil {
		e.CorrelationID = opts.CorrelationID
	}
	p.mu.Lock()
	p.jobs = append(p.jobs, e)
	p.mu.Unlock()
	return e.ID, nil
}

// Jobs returns every job recorded, in order.
func (p *Producer) Jobs() []Enqueued {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.jobs)
}

// Reset forgets every job recorded.
func (p *Producer) Reset() {
	p.mu.Lock()
	p.jobs = nil
	p.mu.Unlock()
}

// EnqueuedArgs decodes the args of every recorded job of T's kind, in order.
// It fails tb if one does not decode, or went to another queue than T's.
func EnqueuedArgs[T queuey.JobArgs](tb testing.TB, p *Producer) []T {
	tb.Helper()
	args := jobutil.Zero[T]()
	kind, queue := args.Kind(), args.Queue()
	var out []T
	for _, e := range p.Jobs() {
		if e.JobType != kind {
			continue
		}
		if e.Queue != queue {
			tb.Fatalf("queueytest: a %q job went to queue %q, want %q", kind, e.Queue, queue)
		}
		var args T
		if err := json.Unmarshal(e.Payload, &args); err != nil {
			tb.Fatalf("queueytest: a %q job's payload %s does not decode: %v", kind, e.Payload, err)
		}
		out = append(out, args)
	}
	return out
}

// RequireEnqueued fails tb unless exactly one job of T's kind was recorded,
// and returns its args.
func RequireEnqueued[T queuey.JobArgs](tb testing.TB, p *Producer) T {
	tb.Helper()
	got := EnqueuedArgs[T](tb, p)
	if len(got) != 1 {
		kind := jobutil.Zero[T]().Kind()
		tb.Fatalf("queueytest: want one %q job enqueued, got %d (all jobs: %v)", kind, len(got), p.Jobs())
	}
	return got[0]
}

// RequireNotEnqueued fails tb if a job of T's kind was recorded.
func RequireNotEnqueued[T queuey.JobArgs](tb testing.TB, p *Producer) {
	tb.Helper()
	if got := EnqueuedArgs[T](tb, p); len(got) != 0 {
		kind := jobutil.Zero[T]().Kind()
		tb.Fatalf("queueytest: want no %q job enqueued, got %d", kind, len(got))
	}
}
