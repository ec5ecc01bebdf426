package queuey

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// maxShortString is AMQP's limit on a short string: the routing key and the
// message_id, type and correlation_id properties among others.
const maxShortString = 255

// ErrFieldTooLong is matched by the error of an enqueue whose job type,
// correlation id or queue name is longer than AMQP's 255-byte limit on the
// short strings they travel in. Nothing was published: amqp091-go would
// refuse the message by closing the whole connection, with every publish in
// flight on it.
var ErrFieldTooLong = errors.New("longer than AMQP's 255-byte limit")

// checkShortStrings refuses an enqueue whose values would not fit the AMQP
// short strings they are sent in; queue is the logical name, whose broker
// name is the routing key. It runs on every enqueue, so it measures the
// broker name (workNameLen) and builds it only to report it; newEnvelope
// builds it for the envelope.
func (p *Producer) checkShortStrings(queue, jobType string, opts *EnqueueOptions) error {
	switch {
	case len(jobType) > maxShortString:
		return errFieldTooLong("job type", jobType)
	case len(opts.correlationID()) > maxShortString:
		return errFieldTooLong("correlation id", opts.correlationID())
	case p.workNameLen(queue) > maxShortString:
		return errFieldTooLong("queue name", p.workName(queue))
	}
	return nil
}

func errFieldTooLong(field, value string) error {
	return fmt.Errorf("queuey: the %s is %d bytes, %w for the AMQP short string it is sent in (%.20q...); nothing was published", field, len(value), ErrFieldTooLong, value)
}

// shortString cuts s to AMQP's 255-byte limit on a UTF-8 boundary, as the
// original queuey does for the message_id and type it sets. The producer
// refuses longer values before they get here; a job that another
// implementation enqueued can still carry one in its envelope, and its retry
// or deferral must not fail for it.
func shortString(s string) string {
	if len(s) <= maxShortString {
		return s
	}
	end := maxShortString
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end]
}
