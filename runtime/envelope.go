package queuey

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Envelope is the JSON body of every queuey message, and the source of truth
// about a job: headers and properties mirror it for tools that cannot read
// JSON. The field names are those of the original queuey envelope, so jobs
// can cross between implementations.
type Envelope struct {
	// JobID is a random UUID, also the AMQP message_id.
	JobID string `json:"job_id"`
	// JobType is the stable kind of the job, also the AMQP type.
	JobType string `json:"job_type"`
	// Queue is the broker name of the work queue the job belongs to.
	Queue string `json:"queue"`
	// Attempt is the 1-based attempt the next delivery will be handled as.
	// This runtime writes 1 and up; a 0 from elsewhere is accepted, as the
	// original queuey accepts it, and handled as the attempt before the
	// first.
	Attempt int `json:"attempt"`
	// EnqueuedAtMs is when the job was first enqueued, in Unix milliseconds.
	// Retries and deferrals keep it.
	EnqueuedAtMs int64 `json:"enqueued_at_ms"`
	// Deferrals counts how often the job was deferred.
	Deferrals int `json:"deferrals"`
	// Priority is the AMQP priority the job was published with; higher is
	// delivered first.
	Priority uint8 `json:"priority"`
	// CorrelationID ties the job to whatever caused it; omitted when empty.
	CorrelationID string `json:"correlation_id,omitempty"`
	// Payload is the job's arguments as JSON.
	Payload json.RawMessage `json:"payload"`
}

// errMalformedEnvelope is wrapped by decodeEnvelope for a body that is not a
// queuey envelope.
var errMalformedEnvelope = errors.New("malformed envelope")

// decodeEnvelope parses a message body by the original queuey's decoder
// rules (crates/core/src/envelope.rs: serde's derive over the Envelope
// struct), so that a job is malformed here exactly when it is there: job_id
// a UUID, job_type, queue, attempt (an unsigned 32-bit integer, 0 accepted),
// enqueued_at_ms (unsigned) and payload present; deferrals (unsigned 32-bit)
// and priority (unsigned 8-bit) optional, 0 when absent. A job_type of ""
// is a job no worker handles, not a malformed one. A body that fails these
// rules is copied to the dead-letter queue verbatim rather than guessed at.
//
// A body in the form queuey's producers write (encodeEnvelope's) is read
// by decodeCanonical without reflection; any other goes through
// encoding/json (decodeEnvelopeJSON), and the two agree on every body
// (FuzzDecodeEnvelope checks it).
func decodeEnvelope(body []byte) (Envelope, error) {
	if e, ok := decodeCanonical(body); ok {
		return checkValues(e) // every field was present
	}
	return decodeEnvelopeJSON(body)
}

// decodeEnvelopeJSON is decodeEnvelope through encoding/json, for any body.
func decodeEnvelopeJSON(body []byte) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", errMalformedEnvelope, err)
	}
	if e.JobID == "" || e.JobType == "" || e.Queue == "" || e.Attempt == 0 || e.EnqueuedAtMs == 0 {
		return checkPresence(body, e)
	}
	return checkValues(e)
}

// checkPresence checks e, decoded from body, where one of the fields
// without a default decoded as its zero value: was it there at all? Only
// then does it pay for a second decode; a field with any other value was
// present. Its checks come in the order of the original's, as checkValues
// then repeats the ones of values.
func checkPresence(body []byte, e Envelope) (Envelope, error) {
	var present struct {
		JobID        *string          `json:"job_id"`
		JobType      *string          `json:"job_type"`
		Queue        *string          `json:"queue"`
		Attempt      *json.RawMessage `json:"attempt"`
		EnqueuedAtMs *json.RawMessage `json:"enqueued_at_ms"`
	}
	_ = json.Unmarshal(body, &present) // it parsed above
	switch {
	case present.JobID == nil:
		return Envelope{}, fmt.Errorf("%w: job_id is missing", errMalformedEnvelope)
	case !isUUID(e.JobID):
		return Envelope{}, fmt.Errorf("%w: job_id %.40q is not a UUID", errMalformedEnvelope, e.JobID)
	case present.JobType == nil:
		return Envelope{}, fmt.Errorf("%w: job_type is missing", errMalformedEnvelope)
	case present.Queue == nil:
		return Envelope{}, fmt.Errorf("%w: queue is missing", errMalformedEnvelope)
	case present.Attempt == nil || string(*present.Attempt) == "null":
		return Envelope{}, fmt.Errorf("%w: attempt is missing", errMalformedEnvelope)
	case e.Attempt < 0 || e.Attempt > math.MaxUint32:
		return Envelope{}, fmt.Errorf("%w: attempt %d is not an unsigned 32-bit integer", errMalformedEnvelope, e.Attempt)
	case present.EnqueuedAtMs == nil || string(*present.EnqueuedAtMs) == "null":
		return Envelope{}, fmt.Errorf("%w: enqueued_at_ms is missing", errMalformedEnvelope)
	}
	return checkValues(e)
}

// decodeCanonical reads a body written exactly as encodeEnvelope writes
// one: the fields in its order, no whitespace, strings of printable ASCII
// without escapes, integers in range, and a payload that is valid JSON with
// nothing around it. It reports false for anything else, which
// encoding/json then reads. json.Unmarshal was 27 % of the worker's
// handler CPU in the worker bench's profile, most of it reflection over
// the envelope struct.
func decodeCanonical(body []byte) (e Envelope, ok bool) {
	r := canonicalReader{b: body, ok: true}
	r.lit(`{"job_id":`)
	e.JobID = r.str()
	r.lit(`,"job_type":`)
	e.JobType = r.str()
	r.lit(`,"queue":`)
	e.Queue = r.str()
	r.lit(`,"attempt":`)
	e.Attempt = int(r.int(64))
	r.lit(`,"enqueued_at_ms":`)
	e.EnqueuedAtMs = r.int(64)
	r.lit(`,"deferrals":`)
	e.Deferrals = int(r.int(64))
	r.lit(`,"priority":`)
	e.Priority = uint8(r.uint(8))
	if r.ok && r.has(`,"correlation_id":`) {
		r.lit(`,"correlation_id":`)
		e.CorrelationID = r.str()
	}
	r.lit(`,"payload":`)
	if !r.ok || len(r.b) < 2 || r.b[len(r.b)-1] != '}' {
		return Envelope{}, false
	}
	payload := r.b[:len(r.b)-1]
	// json.Unmarshal leaves the whitespace around a value out of a
	// RawMessage; this reader leaves such a body to it.
	if isJSONSpace(payload[0]) || isJSONSpace(payload[len(payload)-1]) || !json.Valid(payload) {
		return Envelope{}, false
	}
	e.Payload = json.RawMessage(payload)
	return e, true
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// canonicalReader consumes a canonical envelope from the front of b; ok
// turns false at the first byte out of form, and every later read is then
// a no-op.
type canonicalReader struct {
	b  []byte
	ok bool
}

func (r *canonicalReader) lit(s string) {
	if r.ok = r.ok && r.has(s); r.ok {
		r.b = r.b[len(s):]
	}
}

func (r *canonicalReader) has(s string) bool { return len(r.b) >= len(s) && string(r.b[:len(s)]) == s }

// str reads a string of printable ASCII without escapes.
func (r *canonicalReader) str() string {
	if !r.ok || len(r.b) == 0 || r.b[0] != '"' {
		r.ok = false
		return ""
	}
	for i := 1; i < len(r.b); i++ {
		switch c := r.b[i]; {
		case c == '"':
			s := string(r.b[1:i])
			r.b = r.b[i+1:]
			return s
		case c < 0x20 || c >= 0x7f || c == '\\':
			r.ok = false
			return ""
		}
	}
	r.ok = false
	return ""
}

// number reads a JSON integer: an optional minus, then 0 or digits without
// a leading zero; a fraction or an exponent ends the canonical form.
func (r *canonicalReader) number() string {
	if !r.ok {
		return ""
	}
	i := 0
	if i < len(r.b) && r.b[i] == '-' {
		i++
	}
	start := i
	for i < len(r.b) && '0' <= r.b[i] && r.b[i] <= '9' {
		i++
	}
	if i == start || r.b[start] == '0' && i-start > 1 || i < len(r.b) && (r.b[i] == '.' || r.b[i] == 'e' || r.b[i] == 'E') {
		r.ok = false
		return ""
	}
	s := string(r.b[:i])
	r.b = r.b[i:]
	return s
}

func (r *canonicalReader) int(bits int) int64 {
	n, err := strconv.ParseInt(r.number(), 10, bits)
	r.ok = r.ok && err == nil
	return n
}

func (r *canonicalReader) uint(bits int) uint64 {
	n, err := strconv.ParseUint(r.number(), 10, bits)
	r.ok = r.ok && err == nil
	return n
}

// checkValues checks the values of e, whose fields were all present.
func checkValues(e Envelope) (Envelope, error) {
	switch {
	case !isUUID(e.JobID):
		return Envelope{}, fmt.Errorf("%w: job_id %.40q is not a UUID", errMalformedEnvelope, e.JobID)
	case e.Attempt < 0 || e.Attempt > math.MaxUint32:
		return Envelope{}, fmt.Errorf("%w: attempt %d is not an unsigned 32-bit integer", errMalformedEnvelope, e.Attempt)
	case e.EnqueuedAtMs < 0:
		return Envelope{}, fmt.Errorf("%w: enqueued_at_ms %d is negative", errMalformedEnvelope, e.EnqueuedAtMs)
	case e.Deferrals < 0 || e.Deferrals > math.MaxUint32:
		return Envelope{}, fmt.Errorf("%w: deferrals %d is not an unsigned 32-bit integer", errMalformedEnvelope, e.Deferrals)
	case len(e.Payload) == 0:
		return Envelope{}, fmt.Errorf("%w: payload is missing", errMalformedEnvelope)
	}
	return e, nil
}

// isUUID reports whether s parses as a UUID in one of the forms the
// original's uuid crate accepts: hyphenated (8-4-4-4-12), simple (32 hex
// digits), braced ({hyphenated}) or URN (urn:uuid:hyphenated).
func isUUID(s string) bool {
	switch {
	case len(s) == 45 && strings.HasPrefix(s, "urn:uuid:"):
		s = s[9:]
	case len(s) == 38 && s[0] == '{' && s[37] == '}':
		s = s[1:37]
	}
	hex := func(t string) bool {
		for i := 0; i < len(t); i++ {
			c := t[i]
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
		return true
	}
	switch len(s) {
	case 32:
		return hex(s)
	case 36:
		return s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-' &&
			hex(s[0:8]) && hex(s[9:13]) && hex(s[14:18]) && hex(s[19:23]) && hex(s[24:36])
	}
	return false
}

// encodeEnvelope is json.Marshal(env), byte for byte, without reflection
// for the envelopes producers build: when JobID, JobType, Queue and
// CorrelationID are plain (printable ASCII that JSON and encoding/json's
// HTML escaping leave alone) and the payload is valid JSON that compacting
// and HTML escaping leave alone, it appends the fields itself; otherwise it
// calls json.Marshal. Encoding was 19 % of Enqueue's CPU in the pipelined
// bench's profile (BENCHMARKS.md), most of it reflection over the struct.
func encodeEnvelope(env Envelope) ([]byte, error) {
	if !plainJSON(env.JobID) || !plainJSON(env.JobType) || !plainJSON(env.Queue) || !plainJSON(env.CorrelationID) ||
		!plainPayload(env.Payload) {
		return json.Marshal(env)
	}
	n := 128 + len(env.JobID) + len(env.JobType) + len(env.Queue) + len(env.CorrelationID) + len(env.Payload)
	b := make([]byte, 0, n)
	b = append(b, `{"job_id":"`...)
	b = append(b, env.JobID...)
	b = append(b, `","job_type":"`...)
	b = append(b, env.JobType...)
	b = append(b, `","queue":"`...)
	b = append(b, env.Queue...)
	b = append(b, `","attempt":`...)
	b = strconv.AppendInt(b, int64(env.Attempt), 10)
	b = append(b, `,"enqueued_at_ms":`...)
	b = strconv.AppendInt(b, env.EnqueuedAtMs, 10)
	b = append(b, `,"deferrals":`...)
	b = strconv.AppendInt(b, int64(env.Deferrals), 10)
	b = append(b, `,"priority":`...)
	b = strconv.AppendUint(b, uint64(env.Priority), 10)
	if env.CorrelationID != "" {
		b = append(b, `,"correlation_id":"`...)
		b = append(b, env.CorrelationID...)
		b = append(b, '"')
	}
	b = append(b, `,"payload":`...)
	b = append(b, env.Payload...)
	return append(b, '}'), nil
}

// plainJSON reports whether encoding/json writes s as it is, between quotes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plainByte(s[i]) || s[i] == '"' || s[i] == '\\' {
			return false
		}
	}
	return true
}

// plainByte is a byte encoding/json copies as it is (in a string, where '"'
// and '\\' are not): printable ASCII but the ones it escapes for HTML.
func plainByte(c byte) bool { return c >= 0x20 && c < 0x7f && c != '<' && c != '>' && c != '&' }

// plainPayload reports whether json.Marshal copies raw as it is: valid
// JSON, already compact, with nothing it escapes (HTML characters, and the
// non-ASCII ones such as U+2028 it may).
func plainPayload(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false // json.Marshal writes null
	}
	for _, c := range raw {
		if !plainByte(c) || c == ' ' {
			return false
		}
	}
	return json.Valid(raw)
}
