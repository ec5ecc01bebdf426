package topology

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrDelayTooLong is matched by every *DelayTooLongError.
var ErrDelayTooLong = errors.New("delay is longer than a hold queue can wait")

// ErrInvalidDelay is returned for a negative delay or a granularity that is
// not positive.
var ErrInvalidDelay = errors.New("invalid delay")

// DelayTooLongError refuses a delay that, after rounding, exceeds MaxHoldTTL.
// The delay is refused, never clamped: releasing a job early is a silent
// change of meaning.
type DelayTooLongError struct {
	// Delay is the delay that was asked for.
	Delay time.Duration
}

func (e *DelayTooLongError) Error() string {
	return fmt.Sprintf("delay of %s is longer than a hold queue can wait (%s); it was refused rather than released early",
		FormatDuration(e.Delay), maxHoldWait())
}

// maxHoldWait is MaxHoldTTL for people: whole seconds, as the seed writes it.
func maxHoldWait() string {
	return FormatDuration(time.Duration(MaxHoldTTL) * time.Millisecond / time.Second * time.Second)
}

// Is makes errors.Is(err, ErrDelayTooLong) true.
func (e *DelayTooLongError) Is(target error) bool { return target == ErrDelayTooLong }

// HoldTTL rounds delay up to a whole number of granularity steps, at least
// one, and returns it in milliseconds: the TTL of the hold queue the delay
// waits in. Rounding up means a job is never handed over early, and it bounds
// the number of hold queues per work queue.
func HoldTTL(delay, granularity time.Duration) (int64, error) {
	if granularity <= 0 {
		return 0, fmt.Errorf("%w: granularity %s must be positive", ErrInvalidDelay, granularity)
	}
	if granularity%time.Millisecond != 0 {
		return 0, fmt.Errorf("%w: granularity %s must be a whole number of milliseconds", ErrInvalidDelay, granularity)
	}
	if granularity > time.Duration(MaxHoldTTL)*time.Millisecond {
		// Otherwise the delay would be blamed for a step no delay fits.
		return 0, fmt.Errorf("%w: granularity %s is longer than a hold queue can wait (%s)", ErrInvalidDelay, FormatDuration(granularity), maxHoldWait())
	}
	if delay < 0 {
		return 0, fmt.Errorf("%w: delay %s is negative", ErrInvalidDelay, delay)
	}
	steps := delay / granularity
	if delay%granularity != 0 || steps == 0 {
		steps++
	}
	// Compare in steps so that no product can overflow.
	stepMs := int64(granularity / time.Millisecond)
	if int64(steps) > MaxHoldTTL/stepMs {
		return 0, &DelayTooLongError{Delay: delay}
	}
	return int64(steps) * stepMs, nil
}

// FormatDuration writes d as days, hours, minutes, seconds and milliseconds,
// leaving out zero parts: "30d", "24d 20h 31m 23s", "1m 500ms".
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	var b strings.Builder
	// The magnitude in uint64, where negating math.MinInt64 does not
	// overflow back to itself.
	u := uint64(d)
	if d < 0 {
		b.WriteByte('-')
		u = -u
	}
	parts := []struct {
		unit   time.Duration
		suffix string
	}{
		{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"},
	}
	first := true
	for _, p := range parts {
		n := u / uint64(p.unit)
		u -= n * uint64(p.unit)
		if n == 0 {
			continue
		}
		if !first {
			b.WriteByte(' ')
		}
		first = false
		b.WriteString(strconv.FormatUint(n, 10))
		b.WriteString(p.suffix)
	}
	if u > 0 { // below a millisecond
		if !first {
			b.WriteByte(' ')
		}
		first = false
		b.WriteString(time.Duration(u).String())
	}
	return b.String()
}
