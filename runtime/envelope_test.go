package queuey

import (
	"encoding/json"
	"reflect"
	"testing"
)

// What queuey's producers write is read by the canonical reader, not handed
// to encoding/json: the worker's speed depends on it, and the fuzz target's
// agreement check cannot tell which of the two read a body.
func TestDecodeCanonicalReadsWhatProducersWrite(t *testing.T) {
	t.Parallel()
	for _, env := range []Envelope{
		{JobID: "0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11", JobType: "email.send", Queue: "app.emails", Attempt: 1,
			EnqueuedAtMs: 1733140000000, Payload: json.RawMessage(`{"to":"a@example.com"}`)},
		{JobID: "0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11", JobType: "t", Queue: "q", Attempt: 4, EnqueuedAtMs: 1,
			Deferrals: 3, Priority: 255, CorrelationID: "req-1", Payload: json.RawMessage(`[1,{"a":null},"x"]`)},
	} {
		body, err := encodeEnvelope(env)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := decodeCanonical(body)
		if !ok || !reflect.DeepEqual(got, env) {
			t.Errorf("decodeCanonical(%s) = %+v, %v; want %+v, true", body, got, ok, env)
		}
	}
	// Out of form: encoding/json reads these.
	for _, body := range []string{
		`{"job_type":"t","job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","queue":"q","attempt":1,"enqueued_at_ms":1,"deferrals":0,"priority":0,"payload":1}`,
		`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"t\u00e9","queue":"q","attempt":1,"enqueued_at_ms":1,"deferrals":0,"priority":0,"payload":1}`,
		`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":1,"deferrals":0,"priority":0,"payload":{"a":}}`,
		`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"t","queue":"q","attempt":1e0,"enqueued_at_ms":1,"deferrals":0,"priority":0,"payload":1}`,
	} {
		if got, ok := decodeCanonical([]byte(body)); ok {
			t.Errorf("decodeCanonical(%s) = %+v, true; want it left to encoding/json", body, got)
		}
	}
}
