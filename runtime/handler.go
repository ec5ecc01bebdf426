package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"time"

	"github.com/queuey/terraform-provider-queuey/runtime/internal/jobutil"
)

// Workers is the registry of handlers a worker pool runs, one per job kind.
// Fill it with AddWorker before building the pool.
type Workers struct {
	handlers map[string]handler
	errs     []error
}

// NewWorkers returns an empty registry.
func NewWorkers() *Workers { return &Workers{handlers: map[string]handler{}} }

// AddWorker registers w for jobs of kind T. Registering a second worker for
// a kind, or args whose Kind or Queue is empty, is recorded and refused when
// the pool (or a Dispatcher) is built, so that a misconfigured process fails
// at start-up rather than dead-lettering jobs.
func AddWorker[T JobArgs](workers *Workers, w Worker[T]) {
	if workers.handlers == nil {
		workers.handlers = map[string]handler{}
	}
	h, err := newWorkerHandler(w)
	if err != nil {
		workers.errs = append(workers.errs, err)
		return
	}
	if prev, dup := workers.handlers[h.kind]; dup {
		workers.errs = append(workers.errs, fmt.Errorf("job kind %q has two workers (%s and %s): register one worker per kind", h.kind, prev.describe(), h.describe()))
		return
	}
	workers.handlers[h.kind] = h
}

// validate reports every registration error.
func (ws *Workers) validate() error {
	if ws == nil {
		return errors.New("no workers: register at least one with AddWorker")
	}
	if len(ws.errs) > 0 {
		return errors.Join(ws.errs...)
	}
	if len(ws.handlers) == 0 {
		return errors.New("no workers: register at least one with AddWorker")
	}
	return nil
}

// Kinds lists the registered job kinds, sorted.
func (ws *Workers) Kinds() []string {
	kinds := make([]string, 0, len(ws.handlers))
	for k := range ws.handlers {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

// handler is the type-erased side of a Worker[T].
type handler interface {
	kindName() string
	queueName() string
	describe() string
	// prepare decodes a payload and returns what the dispatcher needs to
	// run it, or an error for a payload the kind cannot decode.
	prepare(payload json.RawMessage, jc JobContext) (*preparedJob, error)
}

// preparedJob is a decoded job, ready to run.
type preparedJob struct {
	// handlerPolicy and jobTypePolicy are the two levels of the retry
	// precedence that the job itself supplies; nil when not implemented.
	handlerPolicy *RetryPolicy
	jobTypePolicy *RetryPolicy
	// timeout is the worker's own timeout, when it implements
	// WorkerWithTimeout.
	timeout    time.Duration
	hasTimeout bool
	// run calls Work with the job context completed.
	run func(ctx context.Context, jc JobContext) error
}

type workerHandler[T JobArgs] struct {
	w     Worker[T]
	kind  string
	queue string
	// argsRetry is whether T implements JobArgsWithRetryPolicy, known
	// from the type, so that prepare boxes a job's args only then.
	argsRetry bool
}

func newWorkerHandler[T JobArgs](w Worker[T]) (h *workerHandler[T], err error) {
	if w == nil {
		return nil, fmt.Errorf("worker for %s is nil", reflect.TypeFor[T]())
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: Kind or Queue panicked on a zero value (%v): they must return constants", reflect.TypeFor[T](), r)
		}
	}()
	args := jobutil.Zero[T]()
	_, argsRetry := any(args).(JobArgsWithRetryPolicy)
	h = &workerHandler[T]{w: w, kind: args.Kind(), queue: args.Queue(), argsRetry: argsRetry}
	switch {
	case h.kind == "":
		return nil, fmt.Errorf("%s: Kind returns an empty string", reflect.TypeFor[T]())
	case h.queue == "":
		return nil, fmt.Errorf("%s (kind %q): Queue returns an empty string", reflect.TypeFor[T](), h.kind)
	}
	return h, nil
}

func (h *workerHandler[T]) kindName() string  { return h.kind }
func (h *workerHandler[T]) queueName() string { return h.queue }
func (h *workerHandler[T]) describe() string  { return fmt.Sprintf("%T", h.w) }

func (h *workerHandler[T]) prepare(payload json.RawMessage, jc JobContext) (*preparedJob, error) {
	args := jobutil.Zero[T]()
	if err := json.Unmarshal(payload, &args); err != nil {
		return nil, err
	}
	job := &Job[T]{JobContext: jc, Args: args}
	p := &preparedJob{}
	if h.argsRetry {
		rp := any(args).(JobArgsWithRetryPolicy).RetryPolicy()
		p.jobTypePolicy = &rp
	}
	if w, ok := h.w.(WorkerWithRetryPolicy[T]); ok {
		rp := w.RetryPolicy(job)
		p.handlerPolicy = &rp
	}
	if w, ok := h.w.(WorkerWithTimeout[T]); ok {
		p.timeout, p.hasTimeout = w.Timeout(job), true
	}
	p.run = func(ctx context.Context, jc JobContext) error {
		job.JobContext = jc
		return h.w.Work(ctx, job)
	}
	return p, nil
}
