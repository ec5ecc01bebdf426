package queuey

import (
	"encoding/json"
	"errors"
	"fmt"
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

// decodeEnvelope parses a message body. A body that is not JSON, or lacks the
// fields a worker needs to route it, is malformed: the worker copies it to the
// dead-letter queue verbatim rather than guessing.
func decodeEnvelope(body []byte) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", errMalformedEnvelope, err)
	}
	switch {
	case e.JobID == "":
		return Envelope{}, fmt.Errorf("%w: job_id is missing", errMalformedEnvelope)
	case e.JobType == "":
		return Envelope{}, fmt.Errorf("%w: job_type is missing", errMalformedEnvelope)
	case e.Attempt < 1:
		return Envelope{}, fmt.Errorf("%w: attempt %d is not a 1-based attempt", errMalformedEnvelope, e.Attempt)
	case e.Deferrals < 0:
		return Envelope{}, fmt.Errorf("%w: deferrals %d is negative", errMalformedEnvelope, e.Deferrals)
	case len(e.Payload) == 0:
		return Envelope{}, fmt.Errorf("%w: payload is missing", errMalformedEnvelope)
	}
	return e, nil
}
