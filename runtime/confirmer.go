package queuey

// The confirmer: the only code that talks to a confirm-mode channel. It
// sends a group of messages and says what became of each; what that means
// for a job is the delivery loop's (delivery.go).

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// outbound is one message of a group: what to publish, and its routing key.
type outbound struct {
	rk  string
	msg amqp.Publishing
}

// fateKind is what became of one message of a group.
type fateKind uint8

const (
	// notSent: it was not written; fate.err says why (the channel or the
	// connection is gone, or the context ended first).
	notSent fateKind = iota
	// acked: the broker confirmed it, at fate.at, and did not return it.
	acked
	// nacked: the broker refused it.
	nacked
	// returned: the broker returned it (fate.ret): no queue had the
	// routing key. Final, whatever its confirm said.
	returned
	// lost: its channel closed before its confirm arrived; the broker may
	// or may not have taken it.
	lost
	// unconfirmed: the context ended while its confirm was due; fate.err
	// is the context's error. The channel is discarded.
	unconfirmed
)

// fate is the outcome of one message of a group.
type fate struct {
	kind fateKind
	at   time.Time // acked: when the ack was seen
	err  error     // notSent, unconfirmed: the cause
	ret  amqp.Return
}

// confirmer is one confirm-mode channel of the producer's pool, shared by
// the tries that hold it at once (ProducerOptions.PublishesPerChannel), each
// waiting for its own confirms: that is what pipelines concurrent
// publishes. The delivery loop reaches the broker's publishing side through
// this interface only, so a fake can stand in for it.
type confirmer interface {
	// open makes sure there is a live channel, opening one (once the
	// connection is back) if it was lost. Concurrent opens of a lost
	// channel open one new channel.
	open(ctx context.Context) error
	// publish publishes each message of group to the default exchange,
	// mandatory, waits for every confirm and returns one fate per message,
	// in order. The messages of a group must not share both a routing key
	// and a MessageId: returns are matched by the two. A group the channel
	// has no room for, or with a message whose key is in flight on it, is
	// not sent: its fates say so with a *busyError.
	publish(ctx context.Context, group []outbound) []fate
	// discard closes the channel; the publishes waiting for confirms on it
	// see them lost.
	discard()
}

// channelConfirmer is the confirmer over an *amqp.Channel, safe for
// concurrent publishes.
//
// Confirms are matched to their publishes by delivery tag (amqp091-go's
// DeferredConfirmation). Returns carry no tag: they are matched by routing
// key and MessageId, which is why no two messages in flight on one channel
// may share both: a publish whose message would (the same job sent twice at
// once, or two foreign messages without an id to one queue) is not sent, and
// is told to wait for the channel to release messages (busyError), as is a
// publish that finds no room. Returns and confirms arrive on different Go
// channels; amqp091-go lists their ordering as a non-goal, because a
// receiver selecting on both can see them in either order. What does hold
// (channel.go, dispatch, in v1.17.0): the broker sends a message's
// basic.return before its basic.ack, and amqp091-go's single reader
// goroutine finishes handing the return to every return listener (a plain
// send into a buffered Go channel) before it processes the ack. So once a
// publish has seen a confirm, the message's return, if any, is in the
// listener or was already taken from it by another publish, which filed it
// under the message's key (chanGen.pending). Every publish drains the
// listener into the pending messages once its confirms are in, then reads
// its own. A message's key stays reserved until its confirm arrives, even
// when its publisher stopped waiting for it (the context ended), so that
// its return can never be taken for a later message's. At most maxInFlight
// messages are reserved on a channel, and the listener's buffer holds as
// many, so amqp091-go never drops a return for want of a reader.
type channelConfirmer struct {
	// dial opens a channel in confirm mode, with its return listener.
	dial func(ctx context.Context) (confirmChannel, <-chan amqp.Return, error)

	mu sync.Mutex
	// gen is the live channel; nil before the first open and after a
	// discard.
	gen *chanGen
	// dialing, while an open dials, is closed when it is done.
	dialing chan struct{}
}

// maxInFlight is how many messages one publishing channel carries at once
// at most, and the buffer of its return listener.
const maxInFlight = 2 * maxChunk

// chanGen is one channel of a confirmer, with the messages in flight on it.
type chanGen struct {
	ch      confirmChannel
	returns <-chan amqp.Return

	mu sync.Mutex
	// pending are the messages reserved on the channel, each with its
	// return once one was drained from the listener (nil until then).
	pending map[returnKey]*amqp.Return
	// room is closed, and replaced, when messages are released.
	room chan struct{}
	// broken is set when a publish on the channel failed because its
	// connection is gone (lostWithConnection): amqp091-go says so only
	// once its reader sees the socket end, and until then the channel
	// looks open and every publish on it fails the same way at once.
	broken atomic.Bool
}

// returnKey is what matches a return to its message.
type returnKey struct{ rk, messageID string }

// confirmChannel is what a channelConfirmer needs of a confirm-mode
// *amqp.Channel (amqpChannel), and confirmation what it needs of an
// *amqp.DeferredConfirmation: what a unit test fakes. publish must be safe
// for concurrent use, as amqp091-go's is.
type confirmChannel interface {
	publish(ctx context.Context, rk string, msg amqp.Publishing) (confirmation, error)
	IsClosed() bool
	Close() error
}

type confirmation interface {
	WaitContext(ctx context.Context) (bool, error)
	Done() <-chan struct{}
	Acked() bool
}

// newChannelConfirmer is the confirmer of a publishing channel of c; a
// channel waits for a lost connection until ctx ends or closing is closed.
func newChannelConfirmer(c *conn, closing <-chan struct{}) *channelConfirmer {
	return &channelConfirmer{dial: func(ctx context.Context) (confirmChannel, <-chan amqp.Return, error) {
		ch, err := c.channelUntil(ctx, closing)
		if err != nil {
			return nil, nil, err
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return nil, nil, fmt.Errorf("queuey: put channel in confirm mode: %w", err)
		}
		return amqpChannel{ch}, ch.NotifyReturn(make(chan amqp.Return, maxInFlight)), nil
	}}
}

// amqpChannel is a confirm-mode *amqp.Channel as a confirmChannel: every
// publish to the default exchange, mandatory.
type amqpChannel struct{ *amqp.Channel }

func (c amqpChannel) publish(ctx context.Context, rk string, msg amqp.Publishing) (confirmation, error) {
	dc, err := c.PublishWithDeferredConfirmWithContext(ctx, "", rk, true, false, msg)
	if err != nil {
		return nil, err
	}
	return dc, nil
}

func (c *channelConfirmer) open(ctx context.Context) error {
	for {
		c.mu.Lock()
		if g := c.gen; g != nil && !g.ch.IsClosed() && !g.broken.Load() {
			c.mu.Unlock()
			return nil
		}
		if wait := c.dialing; wait != nil {
			// Another publish is opening it: wait for that, then
			// look again (its dial may have failed on its context).
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		old := c.gen
		c.gen = nil
		done := make(chan struct{})
		c.dialing = done
		c.mu.Unlock()
		old.close()

		ch, returns, err := c.dial(ctx)
		c.mu.Lock()
		c.dialing = nil
		close(done)
		if err == nil {
			c.gen = &chanGen{ch: ch, returns: returns, pending: make(map[returnKey]*amqp.Return), room: make(chan struct{})}
		}
		c.mu.Unlock()
		return err
	}
}

// discard closes the channel, in the background when it is still open:
// channel.close waits for the broker's answer, which a broker blocking the
// connection's publishes (blocked.go) does not send until the block ends.
// The next open opens a new channel.
func (c *channelConfirmer) discard() {
	c.mu.Lock()
	g := c.gen
	c.gen = nil
	c.mu.Unlock()
	g.close()
}

func (g *chanGen) close() {
	if g == nil {
		return
	}
	if g.ch.IsClosed() {
		_ = g.ch.Close()
	} else {
		go func() { _ = g.ch.Close() }()
	}
}

// errChannelGone is the cause of a message not sent because the channel
// was discarded (Close) before it was sent.
var errChannelGone = fmt.Errorf("the channel closed before the job was sent: %w", amqp.ErrClosed)

func (c *channelConfirmer) publish(ctx context.Context, group []outbound) []fate {
	fates := make([]fate, len(group))
	c.mu.Lock()
	g := c.gen
	c.mu.Unlock()
	if g == nil {
		for i := range fates {
			fates[i] = fate{kind: notSent, err: errChannelGone}
		}
		return fates
	}
	keys, err := g.reserve(group)
	if err != nil {
		for i := range fates {
			fates[i] = fate{kind: notSent, err: err}
		}
		return fates
	}
	dcs := make([]confirmation, 0, len(group))
	for i, o := range group {
		dc, err := g.ch.publish(ctx, o.rk, o.msg)
		if err != nil {
			for j := i; j < len(group); j++ {
				fates[j] = fate{kind: notSent, err: err}
			}
			if lostWithConnection(err) {
				g.broken.Store(true) // the next open opens another channel
			}
			break
		}
		dcs = append(dcs, dc)
	}
	var gaveUp error
	var abandoned []int // unconfirmed: their keys stay reserved
	for i, dc := range dcs {
		if gaveUp == nil {
			ok, err := dc.WaitContext(ctx)
			if err == nil {
				fates[i] = g.settled(ok)
				continue
			}
			gaveUp = err
		}
		// The context ended: the confirms that arrived all the same
		// still count (WaitContext picks at random when both are ready).
		select {
		case <-dc.Done():
			fates[i] = g.settled(dc.Acked())
		default:
			fates[i] = fate{kind: unconfirmed, err: gaveUp}
			abandoned = append(abandoned, i)
		}
	}
	g.collect(keys, fates)
	if len(abandoned) > 0 {
		go g.settleAbandoned(keys, dcs, abandoned)
	}
	return fates
}

// reserve reserves the keys of group's messages on g and returns them. When
// g has no room for them, or one of them is in flight, it reserves nothing
// and returns a *busyError: the caller waits and routes the messages
// afresh, because waiting here would spend the divert probe they were
// routed by.
func (g *chanGen) reserve(group []outbound) ([]returnKey, error) {
	keys := make([]returnKey, len(group))
	for i, o := range group {
		keys[i] = returnKey{o.rk, o.msg.MessageId}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending)+len(keys) > maxInFlight {
		return nil, &busyError{why: fmt.Sprintf("%d messages are in flight on the channel, at most %d can be", len(g.pending), maxInFlight), wait: g.room}
	}
	for _, k := range keys {
		if g.has(k) {
			return nil, &busyError{why: fmt.Sprintf("a message with id %q to %q is in flight on the channel, and their returns could not be told apart", k.messageID, k.rk), wait: g.room}
		}
	}
	before := len(g.pending)
	for _, k := range keys {
		g.pending[k] = nil
	}
	if dup := before + len(keys) - len(g.pending); dup > 0 {
		for _, k := range keys {
			delete(g.pending, k)
		}
		return nil, fmt.Errorf("queuey: %d messages of one publish share a routing key and a message id with another of it, so their returns could not be told apart", dup)
	}
	return keys, nil
}

// busyError is the cause of messages not sent because their channel had no
// room for them, or carried a message with the same key: not a try of the
// job's (judge), which waits for wait and sends it again.
type busyError struct {
	why  string
	wait <-chan struct{}
}

func (e *busyError) Error() string { return "the publishing channel is busy: " + e.why }

// collect drains g's return listener into the messages in flight, then
// reads the returns of keys into fates, and releases the keys whose
// confirms arrived.
func (g *chanGen) collect(keys []returnKey, fates []fate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.drain()
	released := false
	for i, k := range keys {
		switch fates[i].kind {
		case unconfirmed:
			continue // released by settleAbandoned once confirmed
		case acked, nacked, lost:
			if r := g.pending[k]; r != nil {
				fates[i] = fate{kind: returned, ret: *r}
			}
		}
		delete(g.pending, k)
		released = true
	}
	if released {
		g.freed()
	}
}

// freed tells the publishes waiting for room on g (busyError) that messages
// were released; g.mu is held.
func (g *chanGen) freed() {
	close(g.room)
	g.room = make(chan struct{})
}

// drain files the returns waiting in the listener under their messages;
// g.mu is held.
func (g *chanGen) drain() {
	for {
		select {
		case r, ok := <-g.returns:
			if !ok {
				return
			}
			if k := (returnKey{r.RoutingKey, r.MessageId}); g.has(k) {
				g.pending[k] = &r
			}
		default:
			return
		}
	}
}

// has reports whether k is reserved; g.mu is held.
func (g *chanGen) has(k returnKey) bool {
	_, ok := g.pending[k]
	return ok
}

// settleAbandoned waits for the confirms of the messages whose publisher
// gave up on them (they arrive, or the channel's closing settles them),
// then releases their keys.
func (g *chanGen) settleAbandoned(keys []returnKey, dcs []confirmation, abandoned []int) {
	for _, i := range abandoned {
		<-dcs[i].Done()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.drain()
	for _, i := range abandoned {
		delete(g.pending, keys[i])
	}
	g.freed()
}

// settled is the fate of a message whose confirm arrived on g: amqp091-go
// settles the confirms of a closed channel as nacks, though the broker said
// nothing.
func (g *chanGen) settled(ok bool) fate {
	switch {
	case ok:
		return fate{kind: acked, at: time.Now()}
	case g.ch.IsClosed():
		return fate{kind: lost}
	default:
		return fate{kind: nacked}
	}
}
