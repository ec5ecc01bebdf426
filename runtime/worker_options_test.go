package queuey

import (
	"strings"
	"testing"
	"time"
)

// Issue 18: a job timeout longer than the broker's consumer_timeout lets a
// job run until the broker closes its channel, redelivering every job on
// it. Such a timeout is refused at start-up, with how to raise the limit;
// the limit is RabbitMQ's default unless the options state another.
func TestJobTimeoutAboveTheConsumerTimeoutIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts WorkerOptions
		want string // "" when accepted
	}{
		{opts: WorkerOptions{}},
		{opts: WorkerOptions{JobTimeout: 30 * time.Minute}},
		{opts: WorkerOptions{JobTimeout: 31 * time.Minute},
			want: "job timeout 31m0s is longer than the broker's consumer timeout (30m0s, RabbitMQ's default, assumed since WorkerOptions.ConsumerTimeout is not set)"},
		{opts: WorkerOptions{JobTimeout: 2 * time.Hour, ConsumerTimeout: 3 * time.Hour}},
		{opts: WorkerOptions{JobTimeout: 2 * time.Minute, ConsumerTimeout: time.Minute},
			want: "(1m0s, as WorkerOptions.ConsumerTimeout states)"},
		{opts: WorkerOptions{ConsumerTimeout: -time.Second}, want: "consumer timeout -1s is negative"},
	} {
		r, err := tc.opts.resolve()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v refused: %v", tc.opts, err)
		case tc.want == "" && r.ConsumerTimeout == 0:
			t.Errorf("%+v: no consumer timeout after defaults", tc.opts)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error with %q", tc.opts, err, tc.want)
		case tc.want != "" && strings.Contains(tc.want, "longer") && !strings.Contains(err.Error(), "consumer_timeout in rabbitmq.conf"):
			t.Errorf("the error does not say how to raise the limit: %v", err)
		}
	}
	if r, _ := (*WorkerOptions)(nil).resolve(); r.ConsumerTimeout != DefaultConsumerTimeout {
		t.Errorf("nil options: consumer timeout %s, want %s", r.ConsumerTimeout, DefaultConsumerTimeout)
	}
}
