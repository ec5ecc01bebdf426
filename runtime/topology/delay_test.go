package topology_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

func TestHoldTTL(t *testing.T) {
	t.Parallel()

	const ms = time.Millisecond
	tests := []struct {
		name        string
		delay       time.Duration
		granularity time.Duration
		want        int64
	}{
		{"zero delay is one step", 0, time.Second, 1000},
		{"zero delay is one step of 1ms", 0, ms, 1},
		{"zero delay is one step of 500ms", 0, 500 * ms, 500},
		{"one nanosecond", 1, time.Second, 1000},
		{"sub-granularity", 200 * ms, time.Second, 1000},
		{"sub-millisecond with 1ms steps", 1, ms, 1},
		{"just under a step", time.Second - 1, time.Second, 1000},
		{"exact step", time.Second, time.Second, 1000},
		{"just over a step", time.Second + 1, time.Second, 2000},
		{"exact multiple", 30 * time.Second, time.Second, 30000},
		{"29.2s shares Retry-After 30's queue", 29200 * ms, time.Second, 30000},
		{"five minutes", 5 * time.Minute, time.Second, 300000},
		{"500ms steps exact", 1500 * ms, 500 * ms, 1500},
		{"500ms steps round up", 1501 * ms, 500 * ms, 2000},
		{"500ms steps sub-granularity", 499 * ms, 500 * ms, 500},
		{"10s steps sub-granularity", time.Second, 10 * time.Second, 10000},
		{"10s steps exact", 20 * time.Second, 10 * time.Second, 20000},
		{"10s steps round up", 20*time.Second + 1, 10 * time.Second, 30000},
		{"1ms steps keep milliseconds", 1234 * ms, ms, 1234},
		{"1ms steps round sub-millisecond up", 1234*ms + 1, ms, 1235},
		{"granularity 1.5s is whole ms", 2 * time.Second, 1500 * ms, 3000},
		{"ceiling exactly with 1ms", time.Duration(topology.MaxHoldTTL) * ms, ms, topology.MaxHoldTTL},
		{"just under ceiling with 1ms rounds to it", time.Duration(topology.MaxHoldTTL)*ms - 1, ms, topology.MaxHoldTTL},
		{"largest with 1s", 2147483000 * ms, time.Second, 2147483000},
		{"rounds up to largest with 1s", 2147482000*ms + 1, time.Second, 2147483000},
		{"granularity equal to ceiling", 0, time.Duration(topology.MaxHoldTTL) * ms, topology.MaxHoldTTL},
		{"two steps of half the ceiling", time.Duration(topology.MaxHoldTTL/2)*ms + 1, time.Duration(topology.MaxHoldTTL/2) * ms, topology.MaxHoldTTL - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := topology.HoldTTL(tt.delay, tt.granularity)
			if err != nil {
				t.Fatalf("HoldTTL(%v, %v) error = %v, want %d", tt.delay, tt.granularity, err, tt.want)
			}
			if got != tt.want {
				t.Fatalf("HoldTTL(%v, %v) = %d, want %d", tt.delay, tt.granularity, got, tt.want)
			}
		})
	}
}

func TestHoldTTLInvalid(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name        string
		delay       time.Duration
		granularity time.Duration
		mention     string
	}{
		{"negative delay", -1, time.Second, "negative"},
		{"negative delay of a second", -time.Second, time.Second, "negative"},
		{"most negative delay", math.MinInt64, time.Second, "negative"},
		{"zero granularity", time.Second, 0, "positive"},
		{"negative granularity", time.Second, -time.Second, "positive"},
		{"most negative granularity", time.Second, math.MinInt64, "positive"},
		{"sub-millisecond granularity", time.Second, time.Microsecond, "milliseconds"},
		{"one nanosecond granularity", time.Second, 1, "milliseconds"},
		{"granularity not whole ms", time.Second, time.Millisecond + 1, "milliseconds"},
		{"granularity 1.5ms", time.Second, 1500 * time.Microsecond, "milliseconds"},
		{"granularity above the ceiling", 0, time.Duration(topology.MaxHoldTTL+1) * time.Millisecond, "longer than a hold queue"},
		{"granularity of 30 days", time.Second, 30 * 24 * time.Hour, "longer than a hold queue"},
		{"largest whole-ms granularity", math.MaxInt64, math.MaxInt64 / time.Millisecond * time.Millisecond, "longer than a hold queue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := topology.HoldTTL(tt.delay, tt.granularity)
			if err == nil {
				t.Fatalf("HoldTTL(%v, %v) = %d, want an error", tt.delay, tt.granularity, got)
			}
			if got != 0 {
				t.Fatalf("HoldTTL(%v, %v) = %d with error, want 0", tt.delay, tt.granularity, got)
			}
			if !errors.Is(err, topology.ErrInvalidDelay) {
				t.Fatalf("HoldTTL(%v, %v) error = %v, want errors.Is ErrInvalidDelay", tt.delay, tt.granularity, err)
			}
			if errors.Is(err, topology.ErrDelayTooLong) {
				t.Fatalf("HoldTTL(%v, %v) error = %v, also matches ErrDelayTooLong", tt.delay, tt.granularity, err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("HoldTTL(%v, %v) error = %q, want it to mention %q", tt.delay, tt.granularity, err, tt.mention)
			}
		})
	}
}

func TestHoldTTLTooLong(t *testing.T) {
	t.Parallel()

	const ms = time.Millisecond
	tests := []struct {
		name        string
		delay       time.Duration
		granularity time.Duration
	}{
		{"one ms over with 1ms", time.Duration(topology.MaxHoldTTL+1) * ms, ms},
		{"one ns over with 1ms rounds over", time.Duration(topology.MaxHoldTTL)*ms + 1, ms},
		{"one ms over largest with 1s", 2147483001 * ms, time.Second},
		{"one ns over largest with 1s", 2147483000*ms + 1, time.Second},
		{"ceiling itself with 1s rounds over", time.Duration(topology.MaxHoldTTL) * ms, time.Second},
		{"ceiling itself with 10s rounds over", time.Duration(topology.MaxHoldTTL) * ms, 10 * time.Second},
		{"30 days", 30 * 24 * time.Hour, time.Second},
		{"25 days with 1ms", 25 * 24 * time.Hour, ms},
		{"largest duration", math.MaxInt64, time.Second},
		{"largest duration with 1ms", math.MaxInt64, ms},
		{"three steps of half the ceiling", time.Duration(topology.MaxHoldTTL/2)*2*ms + 1, time.Duration(topology.MaxHoldTTL/2) * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := topology.HoldTTL(tt.delay, tt.granularity)
			if err == nil {
				t.Fatalf("HoldTTL(%v, %v) = %d, want refused", tt.delay, tt.granularity, got)
			}
			if got != 0 {
				t.Fatalf("HoldTTL(%v, %v) = %d with error, want 0", tt.delay, tt.granularity, got)
			}
			if !errors.Is(err, topology.ErrDelayTooLong) {
				t.Fatalf("HoldTTL(%v, %v) error = %v, want errors.Is ErrDelayTooLong", tt.delay, tt.granularity, err)
			}
			if errors.Is(err, topology.ErrInvalidDelay) {
				t.Fatalf("HoldTTL(%v, %v) error = %v, also matches ErrInvalidDelay", tt.delay, tt.granularity, err)
			}
			var tooLong *topology.DelayTooLongError
			if !errors.As(err, &tooLong) {
				t.Fatalf("HoldTTL(%v, %v) error = %T, want *DelayTooLongError", tt.delay, tt.granularity, err)
			}
			if tooLong.Delay != tt.delay {
				t.Fatalf("DelayTooLongError.Delay = %v, want the delay asked for, %v", tooLong.Delay, tt.delay)
			}
		})
	}
}

func TestDelayTooLongErrorMessage(t *testing.T) {
	t.Parallel()

	_, err := topology.HoldTTL(30*24*time.Hour, topology.DefaultGranularity)
	const want = "delay of 30d is longer than a hold queue can wait (24d 20h 31m 23s); it was refused rather than released early"
	if err == nil || err.Error() != want {
		t.Fatalf("HoldTTL(30d) error = %v, want %q", err, want)
	}

	// Wrapped by a caller, it still matches.
	wrapped := errors.Join(errors.New("enqueue emails"), err)
	if !errors.Is(wrapped, topology.ErrDelayTooLong) {
		t.Fatalf("wrapped error %v does not match ErrDelayTooLong", wrapped)
	}
	var tooLong *topology.DelayTooLongError
	if !errors.As(wrapped, &tooLong) || tooLong.Delay != 30*24*time.Hour {
		t.Fatalf("errors.As(%v) = %v, want the 30d *DelayTooLongError", wrapped, tooLong)
	}

	// The message shows the delay as asked, not as rounded.
	err = &topology.DelayTooLongError{Delay: 24*24*time.Hour + 20*time.Hour + 31*time.Minute + 23*time.Second + 648*time.Millisecond}
	const want2 = "delay of 24d 20h 31m 23s 648ms is longer than a hold queue can wait (24d 20h 31m 23s); it was refused rather than released early"
	if err.Error() != want2 {
		t.Fatalf("Error() = %q, want %q", err.Error(), want2)
	}

	// ErrDelayTooLong is the only sentinel it matches.
	if errors.Is(err, topology.ErrInvalidDelay) || errors.Is(err, topology.ErrInvalidName) || errors.Is(err, topology.ErrInvalidArgument) {
		t.Fatalf("%v matches a sentinel other than ErrDelayTooLong", err)
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()

	const day = 24 * time.Hour
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1, "1ns"},
		{999, "999ns"},
		{time.Microsecond, "1µs"},
		{500 * time.Microsecond, "500µs"},
		{time.Millisecond - 1, "999.999µs"},
		{time.Millisecond, "1ms"},
		{time.Millisecond + 1, "1ms 1ns"},
		{500 * time.Millisecond, "500ms"},
		{time.Second, "1s"},
		{time.Minute, "1m"},
		{time.Minute + 500*time.Millisecond, "1m 500ms"},
		{time.Hour, "1h"},
		{day, "1d"},
		{30 * day, "30d"},
		{day + time.Second, "1d 1s"},
		{25 * time.Hour, "1d 1h"},
		{90 * time.Minute, "1h 30m"},
		{24*day + 20*time.Hour + 31*time.Minute + 23*time.Second, "24d 20h 31m 23s"},
		{time.Duration(topology.MaxHoldTTL) * time.Millisecond, "24d 20h 31m 23s 647ms"},
		{time.Duration(topology.MaxMessageTTL) * time.Millisecond, "49d 17h 2m 47s 295ms"},
		{day + 2*time.Hour + 3*time.Minute + 4*time.Second + 5*time.Millisecond + 6*time.Microsecond, "1d 2h 3m 4s 5ms 6µs"},
		{-time.Second, "-1s"},
		{-(time.Minute + 500*time.Millisecond), "-1m 500ms"},
		{-1, "-1ns"},
		{math.MaxInt64, "106751d 23h 47m 16s 854ms 775.807µs"},
		{math.MinInt64, "-106751d 23h 47m 16s 854ms 775.808µs"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := topology.FormatDuration(tt.d); got != tt.want {
				t.Fatalf("FormatDuration(%d) = %q, want %q", int64(tt.d), got, tt.want)
			}
		})
	}
}
