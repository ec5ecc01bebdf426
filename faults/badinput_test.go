//go:build faults

package faults

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
)

// badMessage is one message that is not a job the pool can run.
type badMessage struct {
	name   string
	msg    amqp.Publishing
	reason string // prefix of the x-death-reason it must get
}

func envelopeJSON(fields string) []byte {
	return []byte(`{"job_id":"0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11","job_type":"fault.job","queue":"q","enqueued_at_ms":1,` + fields + `}`)
}

func badMessages() []badMessage {
	random := make([]byte, 16<<20)
	_, _ = rand.Read(random)
	deep := append([]byte(`{"job_id":"x","job_type":"fault.job","attempt":1,"payload":`), bytes.Repeat([]byte("["), 20_000)...)
	deep = append(append(deep, bytes.Repeat([]byte("]"), 20_000)...), '}')
	malformed, payload := queuey.ReasonMalformedEnvelope, queuey.ReasonDecodeError
	m := func(name string, body []byte, reason string) badMessage {
		return badMessage{name: name, msg: amqp.Publishing{Body: body, ContentType: "application/json", DeliveryMode: amqp.Persistent}, reason: reason}
	}
	return []badMessage{
		m("plain text", []byte("hello, world"), malformed),
		m("empty body", nil, malformed),
		m("invalid UTF-8", []byte{0xff, 0xfe, 0x00, 0x7b, 0x80}, malformed),
		m("JSON array", []byte(`[1,2,3]`), malformed),
		m("JSON null", []byte(`null`), malformed),
		m("job_id a number", []byte(`{"job_id":5,"job_type":"fault.job","attempt":1,"payload":{}}`), malformed),
		m("attempt a string", envelopeJSON(`"attempt":"1","deferrals":0,"payload":{}`), malformed),
		m("attempt -1", envelopeJSON(`"attempt":-1,"deferrals":0,"payload":{}`), malformed),
		m("job_id not a UUID", bytes.Replace(envelopeJSON(`"attempt":1,"payload":{}`), []byte(`0b9f2f1e-2c59-4d52-9a57-8d7c0f3c9b11`), []byte(`job-1`), 1), malformed),
		m("negative deferrals", envelopeJSON(`"attempt":1,"deferrals":-1,"payload":{}`), malformed),
		m("priority 300", envelopeJSON(`"attempt":1,"priority":300,"payload":{}`), malformed),
		m("no payload", envelopeJSON(`"attempt":1`), malformed),
		m("JSON nested 20,000 deep", deep, malformed),
		m("16 MiB of random bytes", random, malformed),
		m("unknown job type", bytes.Replace(envelopeJSON(`"attempt":1,"payload":{}`), []byte(`"fault.job"`), []byte(`"fault.nobody"`), 1), queuey.ReasonUnknownJobType+" `fault.nobody`"),
		m("payload field of the wrong type", envelopeJSON(`"attempt":1,"payload":{"seq":"seven"}`), payload),
		m("payload a string", envelopeJSON(`"attempt":1,"payload":"seven"`), payload),
		{name: "text/plain content type and AMQP headers of every wrong type", msg: amqp.Publishing{
			Body: []byte("not an envelope either"), ContentType: "text/plain", Type: "fault.job", Priority: 200,
			Headers: amqp.Table{"x-attempt": "three", "x-deferrals": []any{int64(1)}, "x-death": "forged"},
		}, reason: malformed},
	}
}

// TestFaultBadMessagesOnTheWorkQueue publishes malformed, oversized and
// wrongly typed messages straight onto a work queue, between 500 good jobs,
// two good ones of which are oddly typed or oversized themselves. Every bad
// message must land in the dead-letter queue byte for byte with its reason,
// and every good job must be handled: a bad message never stalls the
// consumer.
func TestFaultBadMessagesOnTheWorkQueue(t *testing.T) {
	const good = 500
	prefix := uniquePrefix(t, "badmsg")
	set := jobsSet(prefix)
	work, dead := set.WorkQueue("jobs"), set.DeadQueue("jobs")
	var logs logBuffer
	l := newLedger()
	prod := newProducer(t, amqpURL(), set, &queuey.ProducerOptions{Logger: quiet(&logs)})
	startPool(t, amqpURL(), set, l, &queuey.WorkerOptions{Logger: quiet(&logs)})

	ac, err := amqp.Dial(amqpURL())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ac.Close()
	ch, err := ac.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("confirm: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	raw := func(msg amqp.Publishing) error {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", work, true, false, msg)
		if err != nil {
			return err
		}
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			return fmt.Errorf("not confirmed (%v)", err)
		}
		return nil
	}

	began := time.Now()
	enqueue := func(from, to int) {
		for seq := from; seq < to; seq++ {
			_, err := queuey.EnqueueJob(ctx, prod, faultJob{Seq: seq}, nil)
			l.enqueued(seq, err)
		}
	}
	enqueue(0, good/2)
	bad := badMessages()
	for _, b := range bad {
		if err := raw(b.msg); err != nil {
			t.Fatalf("publish %s: %v", b.name, err)
		}
	}
	badDone := time.Now()
	// Good jobs in unusual clothes: a 16 MiB payload, and a valid envelope
	// whose AMQP properties and headers disagree with it (the envelope is
	// the source of truth).
	odd := []struct {
		seq int
		msg amqp.Publishing
	}{
		{good, amqp.Publishing{ContentType: "application/json", Body: envelopeWith(good, `,"blob":"`+strings.Repeat("a", 16<<20)+`"`)}},
		{good + 1, amqp.Publishing{ContentType: "application/xml", Type: "something.else", Priority: 9,
			Headers: amqp.Table{"x-attempt": "three", "x-deferrals": "many", "x-death": int64(7)}, Body: envelopeWith(good+1, "")}},
	}
	for _, o := range odd {
		err := raw(o.msg)
		l.enqueued(o.seq, err)
	}
	enqueue(good/2, good)

	if !within(2*time.Minute, l.allHandled) {
		t.Errorf("not every good job was handled within 2 min of the bad messages")
	}
	lastGood := time.Since(badDone)

	// The dead-letter queue holds every bad message, verbatim.
	var deadMsgs []amqp.Delivery
	within(time.Minute, func() bool {
		for {
			d, ok, err := ch.Get(dead, false)
			if err != nil {
				t.Fatalf("get from %s: %v", dead, err)
			}
			if !ok {
				break
			}
			deadMsgs = append(deadMsgs, d)
		}
		return len(deadMsgs) >= len(bad)
	})
	if len(deadMsgs) != len(bad) {
		t.Errorf("%s holds %d messages, want the %d bad ones", dead, len(deadMsgs), len(bad))
	}
	matched := 0
	for _, b := range bad {
		found := false
		for _, d := range deadMsgs {
			if !bytes.Equal(d.Body, b.msg.Body) {
				continue
			}
			found = true
			reason, _ := d.Headers["x-death-reason"].(string)
			if !strings.HasPrefix(reason, b.reason) {
				t.Errorf("%s: x-death-reason %q, want %q…", b.name, reason, b.reason)
			}
			if q, _ := d.Headers["x-original-queue"].(string); q != work {
				t.Errorf("%s: x-original-queue %q, want %q", b.name, q, work)
			}
			break
		}
		if found {
			matched++
		} else {
			t.Errorf("%s: not in %s verbatim", b.name, dead)
		}
	}
	names := make([]string, len(bad))
	for i, b := range bad {
		names[i] = b.name
	}
	r := l.row("malformed, oversized and wrongly typed messages on the work queue",
		fmt.Sprintf("%d good jobs (one with a 16 MiB payload, one with wrongly typed headers) around %d bad messages", good+2, len(bad)),
		time.Since(began),
		fmt.Sprintf("%d of %d bad messages dead-lettered byte for byte with their reason (%s); last good job handled %s after the bad ones were published",
			matched, len(bad), strings.Join(names, "; "), lastGood.Round(100*time.Millisecond)))
	r.Published += len(bad)
	record(t, r)
}

func envelopeWith(seq int, extra string) []byte {
	return []byte(fmt.Sprintf(`{"job_id":"5d0c7c59-8c1e-4c55-a0c4-%012d","job_type":"fault.job","queue":"q","attempt":1,"enqueued_at_ms":1,"deferrals":0,"priority":0,"payload":{"seq":%d%s}}`, seq, seq, extra))
}
