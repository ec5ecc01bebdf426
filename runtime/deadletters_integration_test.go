//go:build integration

package queuey

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/runtime/internal/jobutil"
)

// The dead-letter tests seed dlTotal dead letters of dlKinds, with
// dlReasons in turn, every dlMalformedEvery-th one not an envelope.
const (
	dlTotal          = 10000
	dlMalformedEvery = 100
)

var (
	dlKinds   = []string{"mail.send", "report.build", "sms.send", "billing.charge"}
	dlReasons = []string{
		"max attempts (5) exhausted after attempt 5: job timed out after 30s",
		"fatal error: no such address",
		"decode error: json: cannot unmarshal string",
	}
)

// seeded is one dead letter a test put in place.
type seeded struct {
	id, kind, reason string
	malformed        bool
	body             []byte
}

// seedDeadLetters publishes dlTotal dead letters into work's dead-letter
// queue as a worker pool writes them (deadLetterPublishing), with confirms.
func seedDeadLetters(t *testing.T, b *testBroker, work string) []seeded {
	t.Helper()
	ch := b.channel()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	out := make([]seeded, dlTotal)
	var pending []*amqp.DeferredConfirmation
	now := time.Now()
	for i := range out {
		s := seeded{kind: dlKinds[i%len(dlKinds)], reason: dlReasons[i%len(dlReasons)]}
		d := amqp.Delivery{Headers: amqp.Table{"x-attempt": int64(5)}, ContentType: contentTypeJSON}
		if i%dlMalformedEvery == dlMalformedEvery-1 {
			s.malformed, s.kind, s.reason = true, "", ReasonMalformedEnvelope
			s.id = fmt.Sprintf("not-a-uuid-%d", i)
			d.MessageId = s.id
			d.Body = fmt.Appendf(nil, "\x00garbage %d", i)
		} else {
			s.id = jobutil.NewID()
			env := Envelope{JobID: s.id, JobType: s.kind, Queue: work, Attempt: 5, EnqueuedAtMs: now.Add(-time.Hour).UnixMilli(), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
			msg, err := newPublishing(env, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			d.Body, d.MessageId, d.Type = msg.Body, env.JobID, env.JobType
		}
		s.body = d.Body
		out[i] = s
		dc, err := ch.PublishWithDeferredConfirm("", work+".dead", true, false, deadLetterPublishing(d, s.reason, work, 5))
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, dc)
		if len(pending) == 500 || i == len(out)-1 {
			for _, dc := range pending {
				if !dc.Wait() {
					t.Fatal("the broker nacked a seeded dead letter")
				}
			}
			pending = pending[:0]
		}
	}
	return out
}

// deadIDs lists the ids in a dead-letter queue, in order, through List.
func deadIDs(t *testing.T, dl *DeadLetters, queue string) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for {
		page, err := dl.List(context.Background(), queue, ListOptions{Cursor: cursor, Limit: 5000})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page.Letters {
			ids = append(ids, l.JobID)
		}
		if page.NextCursor == "" {
			return ids
		}
		cursor = page.NextCursor
	}
}

// drain takes every message of queue, returning their bodies by message id
// (several for a job replayed more than once).
func drain(t *testing.T, b *testBroker, queue string) map[string][][]byte {
	t.Helper()
	ch := b.channel()
	out := map[string][][]byte{}
	for {
		d, ok := b.get(ch, queue)
		if !ok {
			return out
		}
		out[d.MessageId] = append(out[d.MessageId], d.Body)
	}
}

type dlReport struct {
	N int `json:"n"`
}

func (dlReport) Kind() string  { return "report.build" }
func (dlReport) Queue() string { return "jobs" }

// A filtered replay of one kind, while a worker pool runs: every replayed
// job is handled once, and every other dead letter is still in place, in
// order.
func TestDeadLettersFilteredReplayUnderWorkers(t *testing.T) {
	b := newTestBroker(t)
	ctx := context.Background()
	set := QueueSet{Prefix: b.prefix, Queues: []QueueConfig{{Name: "jobs"}}}
	dl, err := OpenDeadLetters(ctx, b.url, set)
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	seed := seedDeadLetters(t, b, b.name("jobs"))

	var mu sync.Mutex
	handled := map[string]int{}
	workers := NewWorkers()
	AddWorker(workers, WorkFunc[dlReport](func(_ context.Context, job *Job[dlReport]) error {
		mu.Lock()
		handled[job.ID]++
		mu.Unlock()
		return nil
	}))
	pool, err := NewWorkerPool(ctx, b.url, set, workers, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- pool.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("pool: %v", err)
		}
	}()

	var want, rest []string
	for _, s := range seed {
		if s.kind == "report.build" {
			want = append(want, s.id)
		} else {
			rest = append(rest, s.id)
		}
	}
	start := time.Now()
	res, err := dl.Replay(ctx, "jobs", ReplayOptions{Filter: DeadFilter{Kinds: []string{"report.build"}}, ResetAttempts: true})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != len(want) || res.Seen != dlTotal || res.SkippedMalformed != 0 {
		t.Fatalf("replay: %+v, want %d replayed of %d seen", res, len(want), dlTotal)
	}
	eventually(t, time.Minute, 50*time.Millisecond, "every replayed job handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == len(want)
	})
	time.Sleep(time.Second) // time for a duplicate to show
	mu.Lock()
	for _, id := range want {
		if handled[id] != 1 {
			t.Errorf("job %s handled %d times, want once", id, handled[id])
		}
	}
	mu.Unlock()
	left := deadIDs(t, dl, "jobs")
	if !slices.Equal(left, rest) {
		t.Fatalf("the dead-letter queue holds %d dead letters after the replay, want the %d others in their order", len(left), len(rest))
	}
	t.Logf("filtered replay: %d of %d dead letters (kind report.build) replayed in %v and handled once each; %d others in place, in order", res.Done, res.Seen, took.Round(time.Millisecond), len(left))
}

// A replay killed halfway (the process, with SIGKILL) and run again loses
// nothing: every dead letter reaches the work queue at least once.
func TestDeadLettersReplayKilledThenRerunLosesNothing(t *testing.T) {
	b := newTestBroker(t)
	ctx := context.Background()
	set := QueueSet{Prefix: b.prefix, Queues: []QueueConfig{{Name: "jobs"}}}
	dl, err := OpenDeadLetters(ctx, b.url, set)
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	seed := seedDeadLetters(t, b, b.name("jobs"))

	cmd := exec.Command(os.Args[0], "-test.run=^TestDeadLettersReplayChild$", "-test.v")
	cmd.Env = append(os.Environ(), "QUEUEY_DL_CHILD_PREFIX="+b.prefix, "QUEUEY_DL_CHILD_URL="+b.url)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := b.channel()
	work, dead := b.name("jobs"), b.name("jobs")+".dead"
	eventually(t, time.Minute, 5*time.Millisecond, "the child replays a quarter", func() bool { return b.count(ch, work) >= dlTotal/4 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if cmd.ProcessState.Success() {
		t.Fatalf("the child finished before it was killed:\n%s", out.String())
	}
	// The broker requeues what the dead connection held once it notices.
	eventually(t, 30*time.Second, 50*time.Millisecond, "the killed replay's connection gone", func() bool {
		q, err := ch.QueueDeclarePassive(dead, true, false, false, false, nil)
		return err == nil && q.Consumers == 0
	})
	inWork, inDead := b.count(ch, work), b.count(ch, dead)
	t.Logf("killed: %d in the work queue, %d still dead (%d over %d: replayed and confirmed, not yet removed)", inWork, inDead, inWork+inDead-dlTotal, dlTotal)
	if inWork == 0 || inDead == 0 || inWork+inDead < dlTotal {
		t.Fatalf("after the kill: %d in the work queue and %d dead, want some of each and at least %d together", inWork, inDead, dlTotal)
	}

	res, err := dl.Replay(ctx, "jobs", ReplayOptions{ResetAttempts: true, Malformed: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != inDead {
		t.Fatalf("rerun replayed %d, want the %d left", res.Done, inDead)
	}
	if n := b.count(ch, dead); n != 0 {
		t.Fatalf("%d dead letters left after the rerun", n)
	}
	got := drain(t, b, work)
	twice := 0
	for _, s := range seed {
		bodies := got[s.id]
		if len(bodies) == 0 {
			t.Fatalf("dead letter %s (%s) was lost", s.id, s.kind)
		}
		twice += len(bodies) - 1
		if s.malformed && string(bodies[0]) != string(s.body) {
			t.Fatalf("malformed dead letter %s replayed as %q, want its bytes %q", s.id, bodies[0], s.body)
		}
	}
	t.Logf("rerun replayed the %d left; all %d dead letters reached the work queue, %d of them twice", res.Done, dlTotal, twice)
}

// TestDeadLettersReplayChild is the replay that
// TestDeadLettersReplayKilledThenRerunLosesNothing kills.
func TestDeadLettersReplayChild(t *testing.T) {
	prefix := os.Getenv("QUEUEY_DL_CHILD_PREFIX")
	if prefix == "" {
		t.Skip("run by TestDeadLettersReplayKilledThenRerunLosesNothing")
	}
	ctx := context.Background()
	dl, err := OpenDeadLetters(ctx, os.Getenv("QUEUEY_DL_CHILD_URL"), QueueSet{Prefix: prefix, Queues: []QueueConfig{{Name: "jobs"}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := dl.Replay(ctx, "jobs", ReplayOptions{ResetAttempts: true, Malformed: true})
	t.Logf("replayed %+v: %v", res, err)
}

// The time a full replay of dlTotal dead letters takes, and what it leaves:
// every job in the work queue with its id, attempt 1, the malformed ones
// byte for byte.
func TestDeadLettersFullReplay(t *testing.T) {
	b := newTestBroker(t)
	ctx := context.Background()
	set := QueueSet{Prefix: b.prefix, Queues: []QueueConfig{{Name: "jobs"}}}
	dl, err := OpenDeadLetters(ctx, b.url, set)
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	seed := seedDeadLetters(t, b, b.name("jobs"))
	// Without Malformed, the malformed ones stay.
	page, err := dl.List(ctx, "jobs", ListOptions{Filter: DeadFilter{Reasons: []string{ReasonMalformedEnvelope}}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Letters) != dlTotal/dlMalformedEvery || !page.Letters[0].Malformed {
		t.Fatalf("listed %d malformed dead letters, want %d", len(page.Letters), dlTotal/dlMalformedEvery)
	}
	start := time.Now()
	res, err := dl.Replay(ctx, "jobs", ReplayOptions{ResetAttempts: true, Malformed: true})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != dlTotal {
		t.Fatalf("replayed %d, want %d", res.Done, dlTotal)
	}
	got := drain(t, b, b.name("jobs"))
	for _, s := range seed {
		bodies := got[s.id]
		if len(bodies) != 1 {
			t.Fatalf("dead letter %s is in the work queue %d times, want once", s.id, len(bodies))
		}
		if s.malformed {
			if string(bodies[0]) != string(s.body) {
				t.Fatalf("malformed %s replayed as %q, want %q", s.id, bodies[0], s.body)
			}
			continue
		}
		env, err := decodeEnvelope(bodies[0])
		if err != nil || env.JobID != s.id || env.Attempt != 1 || env.JobType != s.kind {
			t.Fatalf("replayed %s as %+v (%v), want its id and kind at attempt 1", s.id, env, err)
		}
	}
	t.Logf("full replay: %d dead letters replayed in %v (%.0f/s)", res.Done, took.Round(time.Millisecond), float64(res.Done)/took.Seconds())
}

// Purge removes what its filter selects, and nothing else.
func TestDeadLettersPurgeFiltered(t *testing.T) {
	b := newTestBroker(t)
	ctx := context.Background()
	set := QueueSet{Prefix: b.prefix, Queues: []QueueConfig{{Name: "jobs"}}}
	dl, err := OpenDeadLetters(ctx, b.url, set)
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	seed := seedDeadLetters(t, b, b.name("jobs"))
	res, err := dl.Purge(ctx, "jobs", DeadFilter{Reasons: []string{"fatal error", ReasonMalformedEnvelope}})
	if err != nil {
		t.Fatal(err)
	}
	var rest []string
	for _, s := range seed {
		if s.reason != "fatal error: no such address" && !s.malformed {
			rest = append(rest, s.id)
		}
	}
	if res.Done != dlTotal-len(rest) {
		t.Fatalf("purged %d, want %d", res.Done, dlTotal-len(rest))
	}
	if left := deadIDs(t, dl, "jobs"); !slices.Equal(left, rest) {
		t.Fatalf("%d left after the purge, want the %d others in order", len(left), len(rest))
	}
	if _, err := dl.List(ctx, "nope", ListOptions{}); err == nil {
		t.Fatal("listing a queue outside the set did not fail")
	}
}

// lockedBuffer collects a child's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}
