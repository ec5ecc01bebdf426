package queuey

// The confirmer: the only code that talks to a confirm-mode channel. It
// sends a group of messages and says what became of each; what that means
// for a job is the delivery loop's (delivery.go).

import (
	"context"
	"fmt"
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

// confirmer is one confirm-mode channel of the producer's pool, used by one
// publisher at a time. The delivery loop reaches the broker's publishing
// side through this interface only, so a fake can stand in for it.
type confirmer interface {
	// open makes sure there is a live channel, opening one (once the
	// connection is back) if it was lost.
	open(ctx context.Context) error
	// publish publishes each message of group to the default exchange,
	// mandatory, waits for every confirm and returns one fate per message,
	// in order. Messages of a group of more than one must have distinct
	// MessageIds: returns are matched by them.
	publish(ctx context.Context, group []outbound) []fate
	// discard closes the channel, so that nothing published on it can be
	// mistaken for a later publish's confirm or return.
	discard()
}

// channelConfirmer is the confirmer over an *amqp.Channel.
//
// Returns and confirms arrive on different Go channels; amqp091-go lists
// their ordering as a non-goal, because a receiver selecting on both can see
// them in either order. What does hold (channel.go, dispatch, in v1.17.0):
// the broker sends a message's basic.return before its basic.ack, and
// amqp091-go's single reader goroutine finishes handing the return to every
// return listener (a plain send into a buffered Go channel) before it
// processes the ack. So publish waits for every confirm of its group, and
// only then drains the return listener without blocking: every return of
// the group is in it, and nothing else was published on the channel
// meanwhile. When the context ends while it waits, it drains the listener
// all the same: a message whose confirm did arrive may have been returned.
// The listener's buffer (maxChunk) always has room, so amqp091-go never
// drops a return for want of a reader.
type channelConfirmer struct {
	// dial opens a channel in confirm mode, with its return listener.
	dial    func(ctx context.Context) (confirmChannel, <-chan amqp.Return, error)
	ch      confirmChannel
	returns <-chan amqp.Return
}

// confirmChannel is what a channelConfirmer needs of a confirm-mode
// *amqp.Channel (amqpChannel), and confirmation what it needs of an
// *amqp.DeferredConfirmation: what a unit test fakes.
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
		return amqpChannel{ch}, ch.NotifyReturn(make(chan amqp.Return, maxChunk)), nil
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
	if c.ch != nil && !c.ch.IsClosed() {
		return nil
	}
	c.discard()
	ch, returns, err := c.dial(ctx)
	if err != nil {
		return err
	}
	c.ch, c.returns = ch, returns
	return nil
}

// discard closes the channel in the background: channel.close waits for
// the broker's answer, which a broker blocking the connection's publishes
// (blocked.go) does not send until the block ends, and the publish that
// gave up must not wait for that. The next open opens a new channel, so
// nothing can read the old one's confirms meanwhile.
func (c *channelConfirmer) discard() {
	if ch := c.ch; ch != nil {
		if ch.IsClosed() {
			_ = ch.Close()
		} else {
			go func() { _ = ch.Close() }()
		}
	}
	c.ch, c.returns = nil, nil
}

// errChannelGone is the cause of a message not sent because an earlier
// send on the channel gave up on it (see unconfirmed).
var errChannelGone = fmt.Errorf("the channel closed before the job was sent: %w", amqp.ErrClosed)

func (c *channelConfirmer) publish(ctx context.Context, group []outbound) []fate {
	fates := make([]fate, len(group))
	if c.ch == nil {
		for i := range fates {
			fates[i] = fate{kind: notSent, err: errChannelGone}
		}
		return fates
	}
	dcs := make([]confirmation, 0, len(group))
	for i, o := range group {
		dc, err := c.ch.publish(ctx, o.rk, o.msg)
		if err != nil {
			for j := i; j < len(group); j++ {
				fates[j] = fate{kind: notSent, err: err}
			}
			break
		}
		dcs = append(dcs, dc)
	}
	var gaveUp error
	for i, dc := range dcs {
		if gaveUp == nil {
			ok, err := dc.WaitContext(ctx)
			if err == nil {
				fates[i] = c.settled(ok)
				continue
			}
			gaveUp = err
		}
		// The context ended: the confirms that arrived all the same
		// still count (WaitContext picks at random when both are ready).
		select {
		case <-dc.Done():
			fates[i] = c.settled(dc.Acked())
		default:
			fates[i] = fate{kind: unconfirmed, err: gaveUp}
		}
	}
	c.collectReturns(group, fates)
	if gaveUp != nil {
		// Confirms still due would be mistaken for the next publisher's.
		c.discard()
	}
	return fates
}

// settled is the fate of a message whose confirm arrived: amqp091-go
// settles the confirms of a closed channel as nacks, though the broker said
// nothing.
func (c *channelConfirmer) settled(ok bool) fate {
	switch {
	case ok:
		return fate{kind: acked, at: time.Now()}
	case c.ch.IsClosed():
		return fate{kind: lost}
	default:
		return fate{kind: nacked}
	}
}

// collectReturns reads the returns waiting in the listener into fates.
func (c *channelConfirmer) collectReturns(group []outbound, fates []fate) {
	var byID map[string]int
	if len(group) > 1 {
		byID = make(map[string]int, len(group))
		for i, o := range group {
			byID[o.msg.MessageId] = i
		}
	}
	for {
		select {
		case r, ok := <-c.returns:
			if !ok {
				return
			}
			i, found := 0, true
			if byID != nil {
				i, found = byID[r.MessageId]
			}
			if found {
				fates[i] = fate{kind: returned, ret: r}
			}
		default:
			return
		}
	}
}
