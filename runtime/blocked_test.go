package queuey

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The block state follows connection.blocked and connection.unblocked: a
// wait returns at once while publishes flow, a *BlockedError with the
// broker's reason when its context ends during a block, and as soon as the
// block ends otherwise; the start and the end are logged.
func TestConnFollowsTheBrokersBlock(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	c := newConn(nil, slog.New(slog.NewTextHandler(&logs, nil)))
	blocks := make(chan amqp.Blocking)
	done := make(chan struct{})
	go func() { defer close(done); c.watchBlocked(nil, blocks) }()

	if err := c.waitUnblocked(context.Background(), nil); err != nil {
		t.Fatalf("unblocked: %v", err)
	}
	blocks <- amqp.Blocking{Active: true, Reason: "low on memory"}
	blocks <- amqp.Blocking{Active: true, Reason: "low on disk"} // a second alarm sends none; one that does changes nothing
	if b, ok := c.block(); !ok || b.Reason != "low on memory" {
		t.Fatalf("block() = %+v, %v", b, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.waitUnblocked(ctx, nil)
	var be *BlockedError
	if !errors.As(err, &be) || !errors.Is(err, ErrPublishingBlocked) || !errors.Is(err, context.DeadlineExceeded) || be.Sent {
		t.Fatalf("wait during a block: %v", err)
	}
	for _, want := range []string{"the broker is blocking publishes", `"low on memory"`, "the job was not sent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	stop := make(chan struct{})
	close(stop)
	if err := c.waitUnblocked(context.Background(), stop); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrPublishingBlocked) {
		t.Errorf("wait during a block, closing: %v", err)
	}

	released := make(chan error, 1)
	go func() { released <- c.waitUnblocked(context.Background(), nil) }()
	time.Sleep(20 * time.Millisecond)
	blocks <- amqp.Blocking{Active: false}
	select {
	case err := <-released:
		if err != nil {
			t.Errorf("released with %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("a wait outlived the unblock")
	}
	if _, ok := c.block(); ok {
		t.Error("still blocked after connection.unblocked")
	}
	// A connection lost while blocked ends the block with it.
	blocks <- amqp.Blocking{Active: true, Reason: "low on disk"}
	close(blocks)
	<-done
	if _, ok := c.block(); ok {
		t.Error("still blocked after the connection was lost")
	}
	for _, want := range []string{"blocking publishes on this connection", "takes publishes again", "blocked connection was lost"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no %q in the log:\n%s", want, logs.String())
		}
	}
	sent := &BlockedError{PublishingBlock: PublishingBlock{Reason: "low on disk", Since: time.Now()}, Sent: true, Err: context.Canceled}
	if !strings.Contains(sent.Error(), "may or may not have been enqueued") {
		t.Errorf("a job sent as the block began: %q", sent)
	}
}
