package queuey

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestRepublishCutsAnOverlongTypeOnAUTF8Boundary pins issue 15: a retry or
// deferral of a job whose envelope job_type is longer than 255 bytes (one
// another implementation enqueued: the original queuey cuts its type
// property and keeps the full job_type in the body) must not hand
// amqp091-go a short string it refuses by closing the connection. The
// message's type is cut to 255 bytes without splitting a character, as the
// original does; the body keeps the job type whole.
func TestRepublishCutsAnOverlongTypeOnAUTF8Boundary(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 200) // 400 bytes
	msg, err := newPublishing(Envelope{JobID: "11111111-2222-4333-8444-555555555555", JobType: long, CorrelationID: strings.Repeat("c", 300), Attempt: 2, Payload: json.RawMessage(`{}`)}, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Type) != 254 || !utf8.ValidString(msg.Type) || msg.Type != strings.Repeat("é", 127) {
		t.Errorf("type property is %d bytes (valid UTF-8 %v), want the 254-byte prefix that ends on a character", len(msg.Type), utf8.ValidString(msg.Type))
	}
	if len(msg.CorrelationId) != 255 {
		t.Errorf("correlation_id property is %d bytes, want it cut to 255", len(msg.CorrelationId))
	}
	var env Envelope
	if err := json.Unmarshal(msg.Body, &env); err != nil || env.JobType != long {
		t.Errorf("the body's job_type was changed: %v", err)
	}
	if got := shortString(strings.Repeat("a", 255)); len(got) != 255 {
		t.Errorf("a 255-byte value was cut to %d", len(got))
	}
}

// TestEnqueueRefusesOverlongShortStrings pins the check the producer runs
// before anything is sent: the field, its length and the limit are named,
// and errors.Is matches ErrFieldTooLong.
func TestEnqueueRefusesOverlongShortStrings(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 256)
	p := &Producer{prefix: "p"}
	for _, tc := range []struct {
		field, queue, jobType string
		opts                  *EnqueueOptions
	}{
		{"job type", "q", long, nil},
		{"correlation id", "q", "t", &EnqueueOptions{CorrelationID: long}},
		{"queue name", long, "t", nil},
		{"queue name", strings.Repeat("x", 254), "t", nil}, // "p." makes it 256
	} {
		err := p.checkShortStrings(tc.queue, tc.jobType, tc.opts)
		if !errors.Is(err, ErrFieldTooLong) || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), "255") {
			t.Errorf("%s of 256 bytes: %v", tc.field, err)
		}
	}
	if err := p.checkShortStrings(strings.Repeat("q", 253), strings.Repeat("x", 255), &EnqueueOptions{CorrelationID: strings.Repeat("y", 255)}); err != nil {
		t.Errorf("255 bytes refused: %v", err)
	}
}
