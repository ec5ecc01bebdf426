//go:build integration

package queuey

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestIntegrationConnReconnectsAndRunsOnConnect(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var connects atomic.Int32
	c, err := dial(ctx, b.url, amqp.Config{}, func(*amqp.Connection) error {
		connects.Add(1)
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := connects.Load(); n != 1 {
		t.Fatalf("onConnect ran %d times on the first connection", n)
	}
	ch, err := c.channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Someone else closing the connection under the conn is, to the
	// watcher, the same as losing it.
	c.mu.Lock()
	cur := c.cur
	c.mu.Unlock()
	_ = cur.Close()
	awaitReconnect(ctx, t, c, cur)
	if !ch.IsClosed() {
		t.Error("a channel of the lost connection is still open")
	}
	if n := connects.Load(); n != 2 {
		t.Errorf("onConnect ran %d times, want 2", n)
	}
	ch, err = c.channel(ctx)
	if err != nil {
		t.Fatalf("channel after the reconnect: %v", err)
	}
	if err := ch.Qos(1, 0, false); err != nil { // a round trip on the new connection
		t.Errorf("channel after the reconnect: %v", err)
	}

	if err := c.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := c.channel(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("channel after close = %v, want ErrClosed", err)
	}
	if err := c.close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second close = %v, want ErrClosed", err)
	}
}

// awaitReconnect waits until c has replaced old, the connection it had, with
// a new one. c makes a connection current only once onConnect has run on it,
// so whatever onConnect declares is there when awaitReconnect returns.
func awaitReconnect(ctx context.Context, t *testing.T, c *conn, old *amqp.Connection) {
	t.Helper()
	for {
		c.mu.Lock()
		cur := c.cur
		c.mu.Unlock()
		if cur != nil && cur != old {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no reconnect")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestIntegrationConnFailsFastWhenTheFirstOnConnectFails(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	boom := errors.New("boom")
	_, err := dial(t.Context(), b.url, amqp.Config{}, func(*amqp.Connection) error { return boom }, nil)
	if !errors.Is(err, boom) {
		t.Errorf("dial = %v, want the onConnect error", err)
	}
	_, err = dial(t.Context(), "amqp://guest:guest@127.0.0.1:1/", amqp.Config{}, nil, nil)
	if err == nil {
		t.Error("dial to a closed port succeeded")
	}
}

func TestIntegrationWrappedConnIsNotRedialled(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	ac, err := amqp.Dial(b.url)
	if err != nil {
		t.Fatal(err)
	}
	c, err := wrapConn(ac, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.close() })
	_ = ac.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	eventually(t, 5*time.Second, 10*time.Millisecond, "channel still opens on a closed connection", func() bool {
		_, err := c.channel(ctx)
		return err != nil && !errors.Is(err, context.DeadlineExceeded)
	})
}

// A URL with several hosts: the first dial goes through them in order (a
// port where nothing listens, then the broker), and a reconnect starts from
// the node after the lost one, goes round to the live one, and runs
// onConnect there. When none answers, the error names each.
func TestIntegrationConnTriesEveryHost(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	at := strings.LastIndex(b.url, "@")
	if at < 0 {
		t.Fatalf("AMQP_URL %q has no user", b.url)
	}
	url := b.url[:at+1] + "127.0.0.1:1," + b.url[at+1:]
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	var connects atomic.Int32
	c, err := dial(ctx, url, amqp.Config{}, func(*amqp.Connection) error {
		connects.Add(1)
		return nil
	}, logger)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	defer c.close()
	c.mu.Lock()
	cur, next := c.cur, c.next
	c.mu.Unlock()
	if next != 1 {
		t.Errorf("connected to host %d, want 1 (the broker, after the dead port)", next)
	}
	_ = cur.Close()
	awaitReconnect(ctx, t, c, cur)
	c.mu.Lock()
	next = c.next
	c.mu.Unlock()
	if n := connects.Load(); n != 2 || next != 1 {
		t.Errorf("after the reconnect: onConnect ran %d times, host %d; want 2 and host 1", n, next)
	}
	mu.Lock()
	if n := strings.Count(logs.String(), "connected to another node"); n != 2 {
		t.Errorf("%d logs of a connection to another node, want 2 (the dial and the reconnect):\n%s", n, logs.String())
	}
	mu.Unlock()

	dead := b.url[:at+1] + "127.0.0.1:1,127.0.0.1:2/"
	_, err = dial(ctx, dead, amqp.Config{}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "none of the 2 brokers") || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "127.0.0.1:2") {
		t.Errorf("dial of two dead hosts = %v; want an error naming both", err)
	}
}

type lockedWriter struct {
	w  *strings.Builder
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
