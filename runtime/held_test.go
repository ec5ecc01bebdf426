package queuey

// The held rows of the delivery loop's table, through a fake confirmer and
// fake hold declarations.

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A long TTL, so that the tests set every time relative to it without
// waiting: the held rows compare the fake declarations' start times with
// the acks' and the renewals' real times.
const (
	heldTTLms = 3_600_000
	heldTTL   = time.Duration(heldTTLms) * time.Millisecond
	heldQueue = "p.a.deferred.3600000"
)

func publishHeldTo(t *testing.T, fc *fakeConfirmer, fh *fakeHolds, ctx context.Context) (*Producer, error) {
	t.Helper()
	p := fakeProducer(t, fc, fh, nil)
	return p, p.publishHeld(ctx, "p.a", true, heldTTLms, msgID("1"))
}

// ago is a start time d before now.
func ago(d time.Duration) time.Time { return time.Now().Add(-d) }

func wantHeld(t *testing.T, p *Producer, fc *fakeConfirmer, fh *fakeHolds, sends, declarations, renewals, resends int) {
	t.Helper()
	if n := len(fc.jobs()); n != sends {
		t.Errorf("%d sends, want %d", n, sends)
	}
	if n := fh.count(); n != declarations {
		t.Errorf("%d declarations, want %d", n, declarations)
	}
	if r, s := p.heldRenewals.Load(), p.heldResends.Load(); r != int64(renewals) || s != int64(resends) {
		t.Errorf("%d renewals, %d resends; want %d, %d", r, s, renewals, resends)
	}
	if len(fc.probes()) != 0 {
		t.Errorf("a held publish probed %v", fc.probes())
	}
}

// Row: acked within a TTL of the declaration, done; the hold queue is
// declared before the send, and nothing is probed.
func TestHeldAckedInTimeIsDone(t *testing.T) {
	t.Parallel()
	fc, fh := newFakeConfirmer(heldQueue), &fakeHolds{}
	p, err := publishHeldTo(t, fc, fh, t.Context())
	wantErr(t, err)
	wantHeld(t, p, fc, fh, 1, 1, 0, 0)
	wantJobs(t, fc, heldQueue)
}

// Row: acked more than a TTL after the declaration: the queue is renewed,
// and the renewal, in time, makes it done.
func TestHeldAckedLateRenewsTheHoldQueue(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer(heldQueue)
	fh := &fakeHolds{started: func(n int) time.Time {
		if n == 1 {
			return ago(heldTTL * 3 / 2)
		}
		return time.Now()
	}}
	p, err := publishHeldTo(t, fc, fh, t.Context())
	wantErr(t, err)
	wantHeld(t, p, fc, fh, 1, 2, 1, 0)
}

// A renewal that shares a declaration begun before the ack minus the TTL
// (a stale flight) declares the queue once more.
func TestHeldRenewalDoesNotGoByAStaleDeclaration(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer(heldQueue)
	fh := &fakeHolds{started: func(n int) time.Time {
		switch n {
		case 1:
			return ago(heldTTL * 3 / 2)
		case 2:
			return ago(time.Hour * 10)
		}
		return time.Now()
	}}
	p, err := publishHeldTo(t, fc, fh, t.Context())
	wantErr(t, err)
	wantHeld(t, p, fc, fh, 1, 3, 1, 0)
}

// Row: the renewal came 2*TTL or more after the declaration: the queue may
// have expired with the job, which is sent again in a new round,
// declaration and all.
func TestHeldRenewedTooLateIsSentAgain(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer(heldQueue)
	fh := &fakeHolds{started: func(n int) time.Time {
		if n == 1 {
			return ago(heldTTL * 5 / 2)
		}
		return time.Now()
	}}
	p, err := publishHeldTo(t, fc, fh, t.Context())
	wantErr(t, err)
	wantHeld(t, p, fc, fh, 2, 3, 1, 1)
}

// Renewed too late in every round: three sends, and the error says so.
func TestHeldRenewedTooLateEveryRoundFails(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer(heldQueue)
	fh := &fakeHolds{}
	fh.started = func(n int) time.Time {
		if n%2 == 1 { // each round's declaration; the renewals are in time
			return ago(heldTTL * 5 / 2)
		}
		return time.Now()
	}
	p, err := publishHeldTo(t, fc, fh, t.Context())
	wantErr(t, err, `publish to "p.a.deferred.3600000"`, "may or may not have been enqueued", "it was sent 3 times, each time too late", "the queue's renewal returned")
	wantHeld(t, p, fc, fh, 3, 6, 3, 2)
}

// Row: the renewal failed: the job is sent again; in the last round, or
// once the context has ended, the error says renewing failed.
func TestHeldRenewalFailure(t *testing.T) {
	t.Parallel()
	refused := errors.New("declare refused")
	lateFirst := func(n int) time.Time {
		if n%2 == 1 {
			return ago(heldTTL * 3 / 2)
		}
		return time.Now()
	}
	renewalsFail := func(n int) error {
		if n%2 == 0 {
			return refused
		}
		return nil
	}
	fc := newFakeConfirmer(heldQueue)
	fh := &fakeHolds{started: lateFirst, err: renewalsFail}
	p, err := publishHeldTo(t, fc, fh, t.Context())
	if !errors.Is(err, refused) {
		t.Errorf("error %v, want the renewal's", err)
	}
	wantErr(t, err, "may or may not have been enqueued", "and renewing the queue failed")
	wantHeld(t, p, fc, fh, 3, 6, 3, 2)

	// The context ends during the first renewal.
	ctx, cancel := context.WithCancel(t.Context())
	fc2 := newFakeConfirmer(heldQueue)
	fh2 := &fakeHolds{started: lateFirst, err: func(n int) error {
		if n == 2 {
			cancel()
			return context.Canceled
		}
		return nil
	}}
	p2, err := publishHeldTo(t, fc2, fh2, ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want the cancellation", err)
	}
	wantErr(t, err, "and renewing the queue failed")
	wantHeld(t, p2, fc2, fh2, 1, 2, 1, 0)
}

// Renewed too late, and the context ended: not sent again.
func TestHeldRenewedTooLateAfterTheContextEnded(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	fc := newFakeConfirmer(heldQueue)
	fh := &fakeHolds{started: func(n int) time.Time {
		if n == 1 {
			return ago(heldTTL * 5 / 2)
		}
		cancel()
		return time.Now()
	}}
	p, err := publishHeldTo(t, fc, fh, ctx)
	wantErr(t, err, "it could not be sent again", "context canceled")
	wantHeld(t, p, fc, fh, 1, 2, 1, 0)
}

// Row: returned, the hold queue expired before the job arrived: a new round,
// declaration and all; returned in every round, it fails unroutable.
func TestHeldReturnedIsSentAgainInANewRound(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer()
	kindsAt(fc, fate{kind: returned})
	fc.queues[heldQueue] = true
	fh := &fakeHolds{}
	p, err := publishHeldTo(t, fc, fh, t.Context())
	wantErr(t, err)
	wantHeld(t, p, fc, fh, 2, 2, 0, 1)

	fc2 := newFakeConfirmer()
	fh2 := &fakeHolds{}
	p2, err := publishHeldTo(t, fc2, fh2, t.Context())
	if !errors.Is(err, ErrUnroutable) {
		t.Errorf("error %v, want ErrUnroutable", err)
	}
	wantHeld(t, p2, fc2, fh2, 3, 3, 0, 2)
}

// After a copy that may have expired with its queue, a failure says the
// job may or may not have been enqueued.
func TestHeldFailureAfterAnEarlierCopy(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer(heldQueue)
	kindsAt(fc, fate{kind: acked}, fate{kind: nacked})
	fh := &fakeHolds{started: func(n int) time.Time {
		if n == 1 {
			return ago(heldTTL * 5 / 2)
		}
		return time.Now()
	}}
	p, err := publishHeldTo(t, fc, fh, t.Context())
	if !errors.Is(err, ErrNacked) {
		t.Errorf("error %v, want ErrNacked", err)
	}
	wantErr(t, err, "its hold queue may have expired with an earlier copy, and sending it again failed")
	wantHeld(t, p, fc, fh, 2, 3, 1, 1)
}

// Row before a send: a declaration that fails fails the job, unsent.
func TestHeldDeclarationFailureFailsUnsent(t *testing.T) {
	t.Parallel()
	refused := errors.New("declare refused")
	fc := newFakeConfirmer(heldQueue)
	fh := &fakeHolds{err: func(int) error { return refused }}
	p, err := publishHeldTo(t, fc, fh, t.Context())
	if !errors.Is(err, refused) {
		t.Errorf("error %v, want the declaration's", err)
	}
	wantHeld(t, p, fc, fh, 0, 1, 0, 0)
}

// The bound: three tries a round, three rounds, so a held job is sent at
// most nine times, each after a declaration of its hold queue. Here each
// round's first two tries are lost with their channel and the third is
// returned.
func TestHeldPublishIsSentNineTimesAtMost(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer()
	fc.fate = func(n int, o outbound) fate {
		if n%3 == 0 {
			return fc.broker(o) // returned: no hold queue
		}
		return fate{kind: lost}
	}
	fh := &fakeHolds{}
	p, err := publishHeldTo(t, fc, fh, t.Context())
	if !errors.Is(err, ErrUnroutable) {
		t.Errorf("error %v, want ErrUnroutable", err)
	}
	wantErr(t, err, "an earlier try may have enqueued the job all the same")
	wantHeld(t, p, fc, fh, 9, 9, 0, 2)
}

// The entry points check before any I/O.
func TestPublishEnvelopeChecksTheHoldTTL(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer(heldQueue, "p.a")
	p := fakeProducer(t, fc, nil, nil)
	env := Envelope{JobID: "1", JobType: "t", Queue: "p.a", Attempt: 1}
	if err := p.publishEnvelope(t.Context(), env, -1); err == nil {
		t.Error("a negative hold TTL was accepted")
	}
	if err := p.publishEnvelope(t.Context(), env, 30*24*3600*1000); !errors.Is(err, ErrDelayTooLong) {
		t.Errorf("a hold TTL of 30d = %v, want ErrDelayTooLong", err)
	}
	other := env
	other.Queue = "elsewhere"
	if err := p.publishEnvelope(t.Context(), other, 1000); !errors.Is(err, ErrUnknownQueue) {
		t.Errorf("a hold on a queue of no set = %v, want ErrUnknownQueue", err)
	}
	wantJobs(t, fc)
	wantErr(t, p.publishEnvelope(t.Context(), env, heldTTLms))
	wantErr(t, p.publishEnvelope(t.Context(), env, 0))
	wantJobs(t, fc, heldQueue, "p.a")
}

// Regression: a held publish sent again after its channel closed (a lost
// connection) skipped the hold queue's declaration, though the queue may
// have expired meanwhile. SPEC §2: declared immediately before every held
// publish.
func TestHeldDeclaresTheHoldQueueBeforeEveryTry(t *testing.T) {
	t.Parallel()
	fc := newFakeConfirmer(heldQueue)
	fh := &fakeHolds{}
	fc.fate = func(n int, o outbound) fate {
		if d := fh.count(); d != n {
			t.Errorf("send %d after %d declarations", n, d)
		}
		return fate{kind: lost}
	}
	p, err := publishHeldTo(t, fc, fh, t.Context())
	if !errors.Is(err, amqp.ErrClosed) {
		t.Errorf("error %v, want ErrClosed", err)
	}
	wantHeld(t, p, fc, fh, maxPublishTries, maxPublishTries, 0, 0)
}
