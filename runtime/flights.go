package queuey

import (
	"context"
	"errors"
	"sync"
	"time"
)

// flights shares calls in progress by key, and remembers nothing once a call
// has ended: a singleflight.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// flight is one call in progress.
type flight struct {
	done chan struct{}
	err  error
	// started is when the call began, before fn ran: what it did at the
	// broker happened at or after it.
	started time.Time
	// waiters counts the callers that joined the call rather than run
	// their own; read by tests, under flights.mu.
	waiters int
}

// do runs fn for key, or, when a call for key is already running, waits for
// it and returns its result. A shared call that failed only because the
// context of the caller that ran it ended is run again for a caller whose
// context is still live.
func (fs *flights) do(ctx context.Context, key string, fn func(context.Context) error) error {
	_, err := fs.doAt(ctx, key, fn)
	return err
}

// doAt is do, also returning when the call whose result it returns started:
// for a call it joined, that is before it joined, possibly long before.
func (fs *flights) doAt(ctx context.Context, key string, fn func(context.Context) error) (time.Time, error) {
	for {
		fs.mu.Lock()
		if fs.m == nil {
			fs.m = map[string]*flight{}
		}
		f, inFlight := fs.m[key]
		if inFlight {
			f.waiters++
		} else {
			f = &flight{done: make(chan struct{}), started: time.Now()}
			fs.m[key] = f
		}
		fs.mu.Unlock()

		if !inFlight {
			f.err = fn(ctx)
			fs.mu.Lock()
			delete(fs.m, key)
			fs.mu.Unlock()
			close(f.done)
			return f.started, f.err
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return f.started, ctx.Err()
		}
		if isContextError(f.err) && ctx.Err() == nil {
			continue
		}
		return f.started, f.err
	}
}

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
