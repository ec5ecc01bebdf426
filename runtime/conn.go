package queuey

// This file is the runtime's connection handling, shared by the producer and
// the worker. Internal API (unexported, stable):
//
//	dial(ctx, url, cfg, onConnect, logger) (*conn, error)
//	    Connects once (url may list several hosts: splitHosts; each is
//	    tried in order, and a reconnect starts from the host after the one
//	    it lost), runs onConnect on the new connection, and from then on
//	    reconnects by itself whenever the connection is lost, with jittered
//	    exponential backoff (500 ms doubling to 30 s), running onConnect again
//	    before anything can use the new connection. onConnect is where a
//	    queue set is declared (declareOnConnect: declareSet on the first
//	    connection, redeclareSet on a reconnect), or nil for a producer
//	    that declares nothing. A failure of the first dial or of the first
//	    onConnect is returned and nothing keeps running; a failed onConnect
//	    on a reconnect closes that connection and counts as a failed
//	    attempt.
//	wrapConn(ac, onConnect, logger) (*conn, error)
//	    The same over a connection the caller dialled: it runs onConnect once
//	    and never reconnects; when ac is lost, channel fails.
//	(*conn).channel(ctx) (*amqp.Channel, error)
//	    Opens a new channel on the current connection, waiting (up to ctx)
//	    while a reconnect is in progress. Channels die with their
//	    connection: keep the *amqp.Channel, and when it reports IsClosed (or
//	    an operation fails with amqp.ErrClosed) open a new one here.
//	(*conn).channelUntil(ctx, stop) (*amqp.Channel, error)
//	    channel, giving up with ErrClosed when stop is closed: for an owner
//	    (a producer) that closes before the conn does.
//	(*conn).close() error
//	    Stops reconnecting and closes the connection (a wrapConn connection
//	    is left open for its owner). Later calls return ErrClosed; channel
//	    returns ErrClosed.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/amqphosts"
)

// Reconnect backoff: the first wait is about reconnectMinBackoff, each failed
// attempt doubles it, up to reconnectMaxBackoff.
const (
	reconnectMinBackoff = 500 * time.Millisecond
	reconnectMaxBackoff = 30 * time.Second
)

// closeTimeout is how long closing a connection waits for the broker's
// close-ok; an answering broker replies within milliseconds (a blocked
// connection's socket is dropped instead: see close).
const closeTimeout = 10 * time.Second

// conn is an AMQP connection that comes back after it is lost. It owns at most
// one *amqp.Connection at a time; channels are opened from it on demand.
type conn struct {
	// urls are the brokers to connect to, one URL per host of the URL
	// given (splitHosts): the nodes of a cluster. A connection tries them
	// in order from next, and a reconnect starts from the node after the
	// one whose connection was lost.
	urls      []string
	next      int // guarded by mu
	cfg       amqp.Config
	onConnect func(*amqp.Connection) error
	logger    *slog.Logger
	redial    bool // false for a caller's connection, which cannot be redialled

	mu     sync.Mutex
	cur    *amqp.Connection // nil while disconnected
	ready  chan struct{}    // closed once cur is set; replaced when cur is lost
	lost   error            // why a connection that cannot be redialled is gone
	closed bool
	// blocked is the broker's block of cur's publishes in progress, nil
	// when there is none (blocked.go).
	blocked *blockState
	// sockets are the sockets of the connections dialled, for close to
	// drop a blocked one; an entry goes when its connection is lost.
	sockets map[*amqp.Connection]net.Conn

	done    chan struct{} // closed by close
	watcher sync.WaitGroup
}

// dial connects to url and keeps the connection up; see the comment at the top
// of this file.
func dial(ctx context.Context, url string, cfg amqp.Config, onConnect func(*amqp.Connection) error, logger *slog.Logger) (*conn, error) {
	urls, err := splitHosts(url)
	if err != nil {
		return nil, err
	}
	c := newConn(onConnect, logger)
	c.urls, c.cfg, c.redial = urls, cfg, true
	ac, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	c.start(ac)
	return c, nil
}

// wrapConn adopts a connection the caller dialled; see the comment at the top
// of this file.
func wrapConn(ac *amqp.Connection, onConnect func(*amqp.Connection) error, logger *slog.Logger) (*conn, error) {
	if ac == nil || ac.IsClosed() {
		return nil, fmt.Errorf("queuey: the AMQP connection is closed")
	}
	c := newConn(onConnect, logger)
	if c.onConnect != nil {
		if err := c.onConnect(ac); err != nil {
			return nil, err
		}
	}
	c.start(ac)
	return c, nil
}

func newConn(onConnect func(*amqp.Connection) error, logger *slog.Logger) *conn {
	if logger == nil {
		logger = slog.Default()
	}
	return &conn{onConnect: onConnect, logger: logger, ready: make(chan struct{}), done: make(chan struct{}), sockets: map[*amqp.Connection]net.Conn{}}
}

// connect dials each URL once, in order from c.next, until one connects
// and its onConnect succeeds; its error, when none does, names each. It is
// used for the first connection and for every reconnect.
func (c *conn) connect(ctx context.Context) (*amqp.Connection, error) {
	c.mu.Lock()
	first := c.next
	c.mu.Unlock()
	ac, k, failed, err := dialInOrder(ctx, c.urls, first, func(url string) (*amqp.Connection, error) { return c.connectTo(ctx, url) })
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.next = k
	c.mu.Unlock()
	if failed > 0 {
		where, _ := redactURL(c.urls[k])
		c.logger.Info("queuey: connected to another node of the cluster", "node", where, "failed", failed)
	}
	return ac, nil
}

// dialInOrder tries urls once each with dial, from urls[first] on and round,
// until one connects, and returns the connection, its index and how many
// failed before it. When none connects, the error names each one's (one
// URL: its error as it is); when ctx ends, it stops at once.
func dialInOrder(ctx context.Context, urls []string, first int, dial func(string) (*amqp.Connection, error)) (*amqp.Connection, int, int, error) {
	var errs []error
	for i := range urls {
		k := (first + i) % len(urls)
		ac, err := dial(urls[k])
		if err == nil {
			return ac, k, i, nil
		}
		if ctx.Err() != nil {
			return nil, 0, 0, err
		}
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return nil, 0, 0, errs[0]
	}
	return nil, 0, 0, fmt.Errorf("queuey: none of the %d brokers could be connected to: %w", len(errs), errors.Join(errs...))
}

// dialAny dials the hosts of url (splitHosts) in order, once each, and
// returns the first connection: for a connection that is not redialled.
func dialAny(ctx context.Context, url string) (*amqp.Connection, error) {
	urls, err := splitHosts(url)
	if err != nil {
		return nil, err
	}
	ac, _, _, err := dialInOrder(ctx, urls, 0, func(url string) (*amqp.Connection, error) {
		ac, err := amqp.Dial(url)
		if err != nil {
			return nil, connectError(url, err)
		}
		return ac, nil
	})
	return ac, err
}

// connectTo dials url once and runs onConnect.
func (c *conn) connectTo(ctx context.Context, url string) (*amqp.Connection, error) {
	cfg := c.cfg
	// DialConfig may write to Properties; every dial gets its own copy.
	cfg.Properties = maps.Clone(c.cfg.Properties)
	// amqp091-go bounds the dial and handshake by the URI's
	// connection_timeout (30 s by default); ctx only stops a reconnect loop
	// between attempts.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The socket is kept, for close to drop it when the broker blocks
	// the connection and would never answer connection.close.
	var raw net.Conn
	dialer := cfg.Dial
	if dialer == nil {
		timeout := 30 * time.Second // amqp091-go's default
		if u, err := amqp.ParseURI(url); err == nil && u.ConnectionTimeout > 0 {
			timeout = time.Duration(u.ConnectionTimeout) * time.Millisecond
		}
		dialer = amqp.DefaultDial(timeout)
	}
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		nc, err := dialer(network, addr)
		raw = nc
		return nc, err
	}
	ac, err := amqp.DialConfig(url, cfg)
	if err != nil {
		return nil, connectError(url, err)
	}
	c.mu.Lock()
	if c.sockets != nil { // nil once closed
		c.sockets[ac] = raw
	}
	c.mu.Unlock()
	if c.onConnect != nil {
		if err := c.onConnect(ac); err != nil {
			_ = ac.Close()
			return nil, err
		}
	}
	return ac, nil
}

// start makes ac the current connection and watches it.
func (c *conn) start(ac *amqp.Connection) {
	lost := ac.NotifyClose(make(chan *amqp.Error, 1))
	c.followBlocks(ac)
	c.mu.Lock()
	c.cur = ac
	close(c.ready)
	c.mu.Unlock()
	c.watcher.Add(1)
	go c.watch(ac, lost)
}

// followBlocks watches ac's connection.blocked notifications. amqp091-go
// sends them without waiting, so the buffer holds a burst; it closes the
// Go channel when the connection shuts down, which ends the goroutine.
func (c *conn) followBlocks(ac *amqp.Connection) {
	blocks := ac.NotifyBlocked(make(chan amqp.Blocking, 8))
	go c.watchBlocked(ac, blocks)
}

// watch waits for the current connection to be lost and replaces it.
func (c *conn) watch(ac *amqp.Connection, lost chan *amqp.Error) {
	defer c.watcher.Done()
	for {
		var reason *amqp.Error
		select {
		case <-c.done:
			return
		case reason = <-lost:
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return
		}
		c.cur = nil
		c.endBlockLocked()
		delete(c.sockets, ac)
		c.ready = make(chan struct{})
		if !c.redial {
			c.lost = fmt.Errorf("queuey: the AMQP connection was lost: %v", describeClose(reason))
			close(c.ready) // wake waiters; they find lost set
			c.mu.Unlock()
			c.logger.Warn("queuey: AMQP connection lost; it was supplied by the caller and is not redialled", "reason", describeClose(reason))
			return
		}
		// The node may be down: the next connection tries the others
		// first.
		c.next = (c.next + 1) % len(c.urls)
		c.mu.Unlock()
		c.logger.Warn("queuey: AMQP connection lost; reconnecting", "reason", describeClose(reason))

		ac = c.reconnect()
		if ac == nil {
			return // closed while reconnecting
		}
		lost = ac.NotifyClose(make(chan *amqp.Error, 1))
		c.followBlocks(ac)
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			_ = ac.Close()
			return
		}
		c.cur = ac
		close(c.ready)
		c.mu.Unlock()
		c.logger.Info("queuey: AMQP connection re-established")
	}
}

// reconnect dials until it succeeds or the conn is closed, in which case it
// returns nil.
func (c *conn) reconnect() *amqp.Connection {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	for attempt := 0; ; attempt++ {
		t := time.NewTimer(backoff(attempt))
		select {
		case <-c.done:
			t.Stop()
			return nil
		case <-t.C:
		}
		ac, err := c.connect(ctx)
		if err == nil {
			return ac
		}
		if ctx.Err() != nil {
			return nil
		}
		c.logger.Warn("queuey: reconnect failed", "attempt", attempt+1, "error", err)
	}
}

// backoff is the wait before reconnect attempt n (0-based): half of
// min(30 s, 500 ms * 2^n) plus a random share of the other half, so that many
// processes that lost one broker do not come back in lockstep.
func backoff(n int) time.Duration {
	d := reconnectMaxBackoff
	if n < 16 {
		d = min(reconnectMinBackoff<<n, reconnectMaxBackoff)
	}
	return d/2 + rand.N(d/2+1)
}

// channel opens a channel on the current connection; see the comment at the
// top of this file.
func (c *conn) channel(ctx context.Context) (*amqp.Channel, error) {
	return c.channelUntil(ctx, nil)
}

// channelUntil is channel, returning ErrClosed once stop is closed; see the
// comment at the top of this file. A nil stop never is.
func (c *conn) channelUntil(ctx context.Context, stop <-chan struct{}) (*amqp.Channel, error) {
	for {
		c.mu.Lock()
		cur, ready, closed, lost := c.cur, c.ready, c.closed, c.lost
		c.mu.Unlock()
		switch {
		case closed:
			return nil, ErrClosed
		case lost != nil:
			return nil, lost
		case cur != nil:
			ch, err := cur.Channel()
			if err == nil {
				return ch, nil
			}
			if !c.redial || errors.Is(err, amqp.ErrChannelMax) {
				return nil, fmt.Errorf("queuey: open channel: %w", err)
			}
			// Anything else (amqp.ErrClosed, a reset socket) means the
			// connection is going and the watcher is about to notice:
			// wait for it rather than spin.
			c.logger.Debug("queuey: open channel failed; waiting for the connection", "error", err)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-c.done:
				return nil, ErrClosed
			case <-stop:
				return nil, ErrClosed
			case <-time.After(10 * time.Millisecond):
			}
		default:
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("queuey: waiting for the AMQP connection to come back: %w", ctx.Err())
			case <-c.done:
				return nil, ErrClosed
			case <-stop:
				return nil, ErrClosed
			case <-ready:
			}
		}
	}
}

// close stops reconnecting and closes the current connection, if any.
func (c *conn) close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closed = true
	cur := c.cur
	c.cur = nil
	blocked := c.endBlockLocked() != nil
	sockets := c.sockets
	c.sockets = nil
	close(c.done)
	c.mu.Unlock()
	var err error
	// A caller's connection stays open: the caller closes it.
	if cur != nil && c.redial && !cur.IsClosed() {
		// A blocked connection's socket is not read by the broker, so
		// connection.close would never be answered, and amqp091-go's
		// CloseDeadline does not help: its heartbeater pushes the read
		// deadline on with every server heartbeat. Drop the socket.
		if raw := sockets[cur]; blocked && raw != nil {
			_ = raw.Close()
		} else {
			err = cur.CloseDeadline(time.Now().Add(closeTimeout))
			if errors.Is(err, amqp.ErrClosed) {
				err = nil
			}
		}
	}
	c.watcher.Wait()
	return err
}

// describeClose renders why a connection closed; nil means the broker or the
// network ended it without saying why.
func describeClose(e *amqp.Error) string {
	if e == nil {
		return "closed without a reason"
	}
	return e.Error()
}

// splitHosts turns an AMQP URL with several hosts in its authority,
// amqp://user:pass@host1:5672,host2:5672,host3/vhost?query, into one URL
// per host, with the same user, password, vhost and query: the nodes of a
// cluster, in the order given. A URL with one host is returned as it is.
// A host list with an empty entry, or a URL amqp091-go cannot parse, is an
// error that says which. It is amqphosts.Split, which the provider's
// migrations use too, with the runtime's prefix on its errors.
func splitHosts(url string) ([]string, error) {
	urls, err := amqphosts.Split(url)
	if err != nil {
		return nil, fmt.Errorf("queuey: %w", err)
	}
	return urls, nil
}
