package queuey

// This file follows the broker's blocking of publishers: under a memory or
// disk alarm RabbitMQ sends connection.blocked to a publishing connection
// and stops reading its socket until every alarm has cleared
// (connection.unblocked). Nothing written to it meanwhile reaches the
// broker, declarations included, and amqp091-go's calls that wait for an
// answer (a declaration, Channel.Close, Connection.Close) wait with it. So a
// producer writes nothing while its connection is blocked: a publish waits
// for the unblock, up to its context, and then fails with a *BlockedError
// that says the job was not sent. A job sent just before the block (the
// broker blocks a connection when it first publishes during an alarm) waits
// for its confirm, and fails, when its context ends, with a *BlockedError
// that says it may or may not have been enqueued.

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrPublishingBlocked: the broker is blocking this connection's publishes
// (a memory or disk alarm). Matched by every *BlockedError.
var ErrPublishingBlocked = errors.New("the broker is blocking publishes")

// PublishingBlock describes a block of a connection's publishes by the
// broker.
type PublishingBlock struct {
	// Reason is the broker's, as it sent it with connection.blocked
	// ("low on memory", "low on disk").
	Reason string
	// Since is when the client heard of the block.
	Since time.Time
}

// BlockedError is a publish that did not complete because the broker was
// blocking publishes when its context ended (or the producer closed).
type BlockedError struct {
	PublishingBlock
	// Sent is false when the job was never written to the broker, which
	// is then sure not to have it; true when it was written before the
	// block began, and may or may not have been enqueued.
	Sent bool
	// For is how long the block had lasted when the publish gave up.
	For time.Duration
	// Err is what ended the wait: the context's error, or ErrClosed.
	Err error
}

func (e *BlockedError) Error() string {
	fate := "the job was not sent"
	if e.Sent {
		fate = "the job was sent as the block began and may or may not have been enqueued"
	}
	return fmt.Sprintf("%s (the broker's reason: %q; blocked for %s): %s: %v",
		ErrPublishingBlocked.Error(), e.Reason, e.For.Round(time.Millisecond), fate, e.Err)
}

// newBlockedError is the error of a publish that gave up now, during b.
func newBlockedError(b PublishingBlock, sent bool, err error) *BlockedError {
	return &BlockedError{PublishingBlock: b, Sent: sent, For: time.Since(b.Since), Err: err}
}

func (e *BlockedError) Is(target error) bool { return target == ErrPublishingBlocked }
func (e *BlockedError) Unwrap() error        { return e.Err }

// blockState is a block in progress on one connection: clear is closed when
// it ends (connection.unblocked, or the connection is lost, which ends the
// block with it).
type blockState struct {
	PublishingBlock
	clear chan struct{}
}

// watchBlocked follows ac's connection.blocked and connection.unblocked
// until amqp091-go closes blocks with the connection, and logs the start
// and the end of each block.
func (c *conn) watchBlocked(ac *amqp.Connection, blocks <-chan amqp.Blocking) {
	for b := range blocks {
		c.mu.Lock()
		if c.cur != ac && c.cur != nil {
			c.mu.Unlock()
			continue
		}
		switch {
		case b.Active && c.blocked == nil:
			c.blocked = &blockState{PublishingBlock: PublishingBlock{Reason: b.Reason, Since: time.Now()}, clear: make(chan struct{})}
			c.mu.Unlock()
			c.logger.Warn("queuey: the broker is blocking publishes on this connection (a resource alarm); publishes wait until it clears, up to their context", "reason", b.Reason)
		case !b.Active && c.blocked != nil:
			was := c.endBlockLocked()
			c.mu.Unlock()
			c.logger.Info("queuey: the broker takes publishes again", "reason", was.Reason, "blocked_for", time.Since(was.Since).Round(time.Millisecond))
		default:
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	if c.cur == ac || c.cur == nil {
		if was := c.endBlockLocked(); was != nil {
			c.mu.Unlock()
			c.logger.Info("queuey: the blocked connection was lost; a new one starts unblocked", "reason", was.Reason, "blocked_for", time.Since(was.Since).Round(time.Millisecond))
			return
		}
	}
	c.mu.Unlock()
}

// endBlockLocked ends the block in progress, if any, and returns it; c.mu
// is held.
func (c *conn) endBlockLocked() *blockState {
	was := c.blocked
	if was != nil {
		close(was.clear)
		c.blocked = nil
	}
	return was
}

// block reports the block in progress on the current connection. A nil
// conn (a unit test's producer over fakes) is never blocked.
func (c *conn) block() (PublishingBlock, bool) {
	if c == nil {
		return PublishingBlock{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blocked == nil {
		return PublishingBlock{}, false
	}
	return c.blocked.PublishingBlock, true
}

// waitUnblocked returns nil at once when the connection is not blocked (the
// common case: one lock), and otherwise waits for the block to end. It
// returns a *BlockedError (Sent false) when ctx ends or stop is closed
// first.
func (c *conn) waitUnblocked(ctx context.Context, stop <-chan struct{}) error {
	if c == nil {
		return nil
	}
	for {
		c.mu.Lock()
		b := c.blocked
		c.mu.Unlock()
		if b == nil {
			return nil
		}
		select {
		case <-b.clear:
		case <-ctx.Done():
			return newBlockedError(b.PublishingBlock, false, ctx.Err())
		case <-stop:
			return newBlockedError(b.PublishingBlock, false, ErrClosed)
		}
	}
}

// Blocked reports whether the broker is blocking the producer's publishes
// (a memory or disk alarm), and since when and why. While it is, publishes
// wait for the block to end, up to their context, and then fail with a
// *BlockedError (errors.Is(err, ErrPublishingBlocked)).
func (p *Producer) Blocked() (PublishingBlock, bool) { return p.conn.block() }

// Blocked reports whether the broker is blocking the publishes of the
// pool's producer (its retries, deferrals and dead letters), and since when
// and why. While it is, a settling delivery waits for the block to end
// (a Stop that runs out of time ends the wait, and the delivery is given
// back); the consuming connection, which publishes nothing, is not blocked.
func (p *WorkerPool) Blocked() (PublishingBlock, bool) {
	if prod, ok := p.pub.(*Producer); ok {
		return prod.Blocked()
	}
	return PublishingBlock{}, false
}
