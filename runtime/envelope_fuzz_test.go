package queuey

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"unicode/utf8"
)

// envelopeSeeds are bodies a work queue sees: queuey's own, and the ways
// other software gets them wrong.
var envelopeSeeds = []string{
	`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"email.send","queue":"app.emails","attempt":1,"enqueued_at_ms":1733140000000,"deferrals":0,"priority":0,"payload":{"to":"a@example.com"}}`,
	`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"t","queue":"q","attempt":3,"enqueued_at_ms":1,"deferrals":2,"priority":10,"correlation_id":"req-1","payload":null}`,
	`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":[1,2,{"a":"\u00e9"}]}`,
	`{"job_id":5,"job_type":"t","attempt":1,"payload":{}}`,
	`{"job_id":"x","job_type":"t","attempt":"1","payload":{}}`,
	`{"job_id":"x","job_type":"t","attempt":0,"payload":{}}`,
	`{"job_id":"x","job_type":"t","attempt":1,"deferrals":-1,"payload":{}}`,
	`{"job_id":"x","job_type":"t","attempt":1,"priority":256,"payload":{}}`,
	`{"job_id":"x","job_type":"t","attempt":1}`,
	`{"job_id":"x","job_type":"t","attempt":1e3,"payload":1}`,
	`{"JOB_ID":"x","Job_Type":"t","attempt":1,"payload":1}`,
	`{"job_id":"x","job_id":"","job_type":"t","attempt":1,"payload":1}`,
	`[1,2,3]`, `null`, `""`, `{}`, ``, `hello, world`, "\xff\xfe\x00{",
	`{"job_id":"x","job_type":"t","attempt":9223372036854775808,"payload":1}`,
	// The canonical form's edges: what decodeCanonical must leave to
	// encoding/json, or read as it does.
	`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"t","queue":"q","attempt":01,"enqueued_at_ms":1,"deferrals":0,"priority":0,"payload":1}`,
	`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"t","queue":"q","attempt":-0,"enqueued_at_ms":1,"deferrals":0,"priority":-0,"payload":1}`,
	`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":1,"deferrals":0,"priority":256,"payload":1}`,
	`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":1,"deferrals":0,"priority":0,"payload": 1}`,
	`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":1,"deferrals":0,"priority":0,"payload":1 }`,
	`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"t\u00e9","queue":"q","attempt":1,"enqueued_at_ms":1,"deferrals":0,"priority":0,"payload":{"a":1}}`,
	`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":1,"deferrals":0,"priority":0,"correlation_id":"c","payload":{"a":1}}}`,
	`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":1.5,"deferrals":0,"priority":0,"payload":[]}`,
}

// FuzzDecodeEnvelope feeds arbitrary bodies to the decoder a worker runs on
// every delivery. It must never panic; a refusal must match
// errMalformedEnvelope (the worker dead-letters on that); an envelope it
// accepts must have what a worker routes by, and survive a round trip
// through the encoder unchanged.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, s := range envelopeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := decodeEnvelope(body)
		// The canonical reader and encoding/json agree on every body:
		// the same envelope, or the same refusal.
		std, stdErr := decodeEnvelopeJSON(body)
		if !reflect.DeepEqual(e, std) || fmt.Sprint(err) != fmt.Sprint(stdErr) {
			t.Fatalf("decodeEnvelope(%q):\n%+v, %v\nencoding/json:\n%+v, %v", body, e, err, std, stdErr)
		}
		if err != nil {
			if !errors.Is(err, errMalformedEnvelope) {
				t.Fatalf("decodeEnvelope(%q) refused with %v, which is not errMalformedEnvelope", body, err)
			}
			if !reflect.DeepEqual(e, Envelope{}) {
				t.Fatalf("decodeEnvelope(%q) refused but returned %+v", body, e)
			}
			return
		}
		// The original queuey's decoder rules (see decodeEnvelope): a
		// job_type of "" and attempt 0 are accepted there, so here too.
		if !isUUID(e.JobID) || e.Attempt < 0 || e.EnqueuedAtMs < 0 || e.Deferrals < 0 || len(e.Payload) == 0 {
			t.Fatalf("decodeEnvelope(%q) accepted %+v", body, e)
		}
		if !json.Valid(e.Payload) {
			t.Fatalf("decodeEnvelope(%q) accepted a payload that is not JSON: %q", body, e.Payload)
		}
		again, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", e, err)
		}
		e2, err := decodeEnvelope(again)
		if err != nil {
			t.Fatalf("decodeEnvelope refused its own re-encoding %s: %v", again, err)
		}
		third, _ := json.Marshal(e2)
		if !bytes.Equal(again, third) {
			t.Fatalf("round trip changed the envelope:\n%s\n%s", again, third)
		}
	})
}

// FuzzEnvelopeRoundTrip builds envelopes from arbitrary fields, encodes them
// as the producer does (newPublishing, encodeEnvelope, which must match
// json.Marshal byte for byte) and decodes the body as the worker does:
// whatever the producer sends, the worker reads back field for field.
func FuzzEnvelopeRoundTrip(f *testing.F) {
	f.Add("0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11", "email.send", "app.emails", 1, 0, uint8(0), int64(1733140000000), "", []byte(`{"to":"a@example.com"}`))
	f.Add("0B9F2F1E2C594D529A578D7C0F3C9B11", "t", "", 7, 3, uint8(255), int64(0), "corr\u00e9", []byte(`"\u2028"`))
	f.Add("{0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11}", "t\x00", "q", 1<<31, 0, uint8(9), int64(0), "c", []byte(`null`))
	// What encoding/json escapes for HTML, and a payload it compacts.
	f.Add("0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11", "<b>&", "q\"\\", 2, 1, uint8(5), int64(1), "a&b", []byte(`{ "x" : "<y>" }`))
	f.Add("0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11", "a<b", "q", 1, 0, uint8(0), int64(1), "", []byte(`{"x":1}`))
	f.Add("0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11", "t", "q", 1, 0, uint8(0), int64(1), "", []byte(`{"x":"a>b"}`))
	f.Fuzz(func(t *testing.T, id, jobType, queue string, attempt, deferrals int, prio uint8, at int64, corr string, payload []byte) {
		// The producer's encoder is encoding/json's, byte for byte,
		// whatever the fields (and the error too, for a payload that is
		// not JSON).
		env := Envelope{JobID: id, JobType: jobType, Queue: queue, Attempt: attempt, EnqueuedAtMs: at,
			Deferrals: deferrals, Priority: prio, CorrelationID: corr, Payload: json.RawMessage(payload)}
		fast, fastErr := encodeEnvelope(env)
		std, stdErr := json.Marshal(env)
		if !bytes.Equal(fast, std) || (fastErr == nil) != (stdErr == nil) {
			t.Fatalf("encodeEnvelope:\n%q, %v\njson.Marshal:\n%q, %v", fast, fastErr, std, stdErr)
		}
		if !isUUID(id) || jobType == "" || attempt < 1 || attempt > math.MaxUint32 || deferrals < 0 || deferrals > math.MaxUint32 || at < 0 || !json.Valid(payload) {
			return // the producer never builds these
		}
		for _, s := range []string{id, jobType, queue, corr} {
			if !utf8.ValidString(s) {
				return // encoding/json replaces invalid UTF-8; nothing to compare
			}
		}
		in := Envelope{JobID: id, JobType: jobType, Queue: queue, Attempt: attempt, EnqueuedAtMs: at,
			Deferrals: deferrals, Priority: prio, CorrelationID: corr, Payload: json.RawMessage(payload)}
		msg, err := newPublishing(in, true, nil)
		if err != nil {
			t.Fatalf("newPublishing(%+v): %v", in, err)
		}
		out, err := decodeEnvelope(msg.Body)
		if err != nil {
			t.Fatalf("the worker refused what the producer sent (%s): %v", msg.Body, err)
		}
		// encoding/json may re-escape the payload (& as \u0026): compare
		// its meaning, not its bytes.
		want, got := jsonValue(t, payload), jsonValue(t, out.Payload)
		out.Payload, in.Payload = nil, nil
		if !reflect.DeepEqual(in, out) || !reflect.DeepEqual(want, got) {
			t.Fatalf("round trip:\nsent %+v %s\ngot  %+v %s", in, payload, out, msg.Body)
		}
		if msg.MessageId != id || msg.Type != shortString(jobType) || msg.Priority != prio {
			t.Fatalf("properties %q %q %d do not mirror the envelope", msg.MessageId, msg.Type, msg.Priority)
		}
	})
}

// jsonValue decodes JSON keeping numbers exact.
func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return v
}

type fuzzArgs struct {
	N int `json:"n"`
}

func (fuzzArgs) Kind() string  { return "fuzz.job" }
func (fuzzArgs) Queue() string { return "jobs" }

// FuzzDispatch runs arbitrary bodies through the whole decision path of a
// delivery (envelope, job type, payload, handler, retry policy). It must
// never panic, and every body gets exactly one of the four outcomes; one
// that is not an envelope is dead-lettered as malformed.
func FuzzDispatch(f *testing.F) {
	for _, s := range envelopeSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"job_id":"x","job_type":"fuzz.job","attempt":1,"payload":{"n":1}}`))
	f.Add([]byte(`{"job_id":"x","job_type":"fuzz.job","attempt":2,"payload":{"n":"one"}}`))
	f.Add([]byte(`{"job_id":"x","job_type":"fuzz.job","attempt":10,"payload":{"n":-1}}`))
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[fuzzArgs](func(ctx context.Context, job *Job[fuzzArgs]) error {
		switch {
		case job.Args.N < 0:
			return errors.New("negative")
		case job.Args.N == 2:
			return JobDefer(job.Age(), "two")
		case job.Args.N == 3:
			return JobFatal(nil)
		case job.Args.N == 4:
			panic("four")
		}
		return nil
	}))
	d, err := NewDispatcher(ws, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		o := d.Dispatch(context.Background(), "jobs", body)
		switch o.Action {
		case ActionAck, ActionRetry, ActionDefer, ActionDeadLetter:
		default:
			t.Fatalf("Dispatch(%q) = action %v", body, o.Action)
		}
		if _, err := decodeEnvelope(body); err != nil && (o.Action != ActionDeadLetter || o.Reason != ReasonMalformedEnvelope) {
			t.Fatalf("Dispatch(%q) of a malformed body = %v %q", body, o.Action, o.Reason)
		}
		if o.Action == ActionDefer || o.Action == ActionRetry {
			if o.HoldTTL <= 0 {
				t.Fatalf("Dispatch(%q) = %v with hold TTL %s", body, o.Action, o.HoldTTL)
			}
		}
	})
}
