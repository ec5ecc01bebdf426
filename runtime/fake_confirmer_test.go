package queuey

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// fakeConfirmer stands in for a confirm-mode channel: a little broker with
// the queues in queues (which ack) and refuse (which nack, as a divert queue
// does); a message to any other name is returned. fate, when set, decides
// instead, given the n-th message sent (from 1, probes included).
type fakeConfirmer struct {
	mu      sync.Mutex
	queues  map[string]bool
	refuse  map[string]bool
	fate    func(n int, o outbound) fate
	openErr error
	sent    []outbound
	opens   int
}

func newFakeConfirmer(queues ...string) *fakeConfirmer {
	f := &fakeConfirmer{queues: map[string]bool{}, refuse: map[string]bool{}}
	for _, q := range queues {
		f.queues[q] = true
	}
	return f
}

func (f *fakeConfirmer) open(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens++
	return f.openErr
}

func (f *fakeConfirmer) discard() {}

func (f *fakeConfirmer) publish(_ context.Context, group []outbound) []fate {
	fates := make([]fate, len(group))
	for i, o := range group {
		f.mu.Lock()
		f.sent = append(f.sent, o)
		n, script := len(f.sent), f.fate
		f.mu.Unlock()
		if script != nil {
			fates[i] = script(n, o)
			continue
		}
		fates[i] = f.broker(o)
	}
	return fates
}

// broker is the fate of o by the queues the fake has.
func (f *fakeConfirmer) broker(o outbound) fate {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.refuse[o.rk]:
		return fate{kind: nacked}
	case f.queues[o.rk]:
		return fate{kind: acked, at: time.Now()}
	}
	return fate{kind: returned, ret: amqp.Return{RoutingKey: o.rk, MessageId: o.msg.MessageId, ReplyCode: 312, ReplyText: "NO_ROUTE"}}
}

// jobs returns the routing keys of the messages sent that were not probes.
func (f *fakeConfirmer) jobs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, o := range f.sent {
		if !strings.HasSuffix(o.rk, topology.DivertSuffix) {
			out = append(out, o.rk)
		}
	}
	return out
}

// probes returns the divert queues probed, in order.
func (f *fakeConfirmer) probes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, o := range f.sent {
		if strings.HasSuffix(o.rk, topology.DivertSuffix) {
			out = append(out, o.rk)
		}
	}
	return out
}

// fakeHolds stands in for the hold declarations: the n-th declaration
// (from 1) reports started(n), now unless set, and fails with err(n).
type fakeHolds struct {
	mu      sync.Mutex
	started func(n int) time.Time
	err     func(n int) error
	calls   int
}

func (h *fakeHolds) declareHold(context.Context, string, string, int64, bool) (time.Time, error) {
	h.mu.Lock()
	h.calls++
	n := h.calls
	h.mu.Unlock()
	at := time.Now()
	if h.started != nil {
		at = h.started(n)
	}
	if h.err != nil {
		if err := h.err(n); err != nil {
			return at, err
		}
	}
	return at, nil
}

func (h *fakeHolds) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

// fakeSet is the set of the fake producers: work queues p.a and p.b.
var fakeSet = QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "a"}, {Name: "b"}}}

// fakeProducer is a declared producer of fakeSet over fc and fh (fh nil:
// a fakeHolds that declares everything at once), with one channel unless
// opts says otherwise, and a quiet logger.
func fakeProducer(t *testing.T, fc *fakeConfirmer, fh holdDeclarer, opts *ProducerOptions) *Producer {
	t.Helper()
	o := ProducerOptions{Channels: 1}
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if fh == nil {
		fh = &fakeHolds{}
	}
	set := fakeSet
	return newProducer(nil, &set, set.Prefix, &o, &seams{
		confirmer: func(confirmer) confirmer { return fc },
		holds:     func(holdDeclarer) holdDeclarer { return fh },
	})
}

func msgID(id string) amqp.Publishing { return amqp.Publishing{MessageId: id} }
