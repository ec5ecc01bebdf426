//go:build integration

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
)

// TestIntegrationDemo runs the end-to-end example under a prefix of its own,
// so that the example cannot rot: each of its four outcomes, the hold queues'
// life cycle and the dead letter's headers are checked.
func TestIntegrationDemo(t *testing.T) {
	b := brokertest.New(t, "demo-test")
	cfg := config{
		amqpURL:    b.AMQPURL,
		endpoint:   b.Endpoint,
		username:   b.Username,
		password:   b.Password,
		prefix:     b.Prefix,
		holdExpiry: 20 * time.Second,
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	rep, err := run(ctx, &out, cfg)
	if testing.Verbose() || err != nil {
		os.Stdout.WriteString(out.String())
	}
	if err != nil {
		t.Fatalf("demo failed: %v", err)
	}

	want := map[string]struct {
		outcome             string
		attempts, deferrals int
	}{
		"ada@example.com":   {"sent", 1, 0},
		"bob@example.com":   {"sent", 1, 1},
		"carol@example.com": {"sent", 3, 0},
		"dave@example.com":  {"dead-lettered", 3, 0},
	}
	for to, w := range want {
		if rep.Outcome[to] != w.outcome || rep.Attempts[to] != w.attempts || rep.Deferrals[to] != w.deferrals {
			t.Errorf("%s: %s after %d attempt(s) and %d deferral(s), want %s after %d and %d",
				to, rep.Outcome[to], rep.Attempts[to], rep.Deferrals[to], w.outcome, w.attempts, w.deferrals)
		}
	}
	// bob's deferral waits in the 1000 ms hold queue; retries at least in
	// one of the 500 ms steps' queues.
	deferred := cfg.prefix + ".emails.deferred.1000"
	if !contains(rep.HoldQueuesSeen, deferred) {
		t.Errorf("hold queues seen = %v, want %s among them", rep.HoldQueuesSeen, deferred)
	}
	if len(rep.HoldQueuesSeen) == 0 || len(rep.HoldQueuesGone) != len(rep.HoldQueuesSeen) {
		t.Errorf("hold queues seen %v, deleted themselves %v: want every one seen to delete itself", rep.HoldQueuesSeen, rep.HoldQueuesGone)
	}
	if got := rep.DeadLetter["x-original-queue"]; got != cfg.prefix+".emails" {
		t.Errorf("dead letter x-original-queue = %v, want %s.emails", got, cfg.prefix)
	}
	if got := fmt.Sprint(rep.DeadLetter["x-attempts"]); got != "3" {
		t.Errorf("dead letter x-attempts = %v, want 3", got)
	}
	if reason := fmt.Sprint(rep.DeadLetter["x-death-reason"]); !strings.Contains(reason, "550 mailbox does not exist") {
		t.Errorf("dead letter x-death-reason = %q, want the mail API's answer in it", reason)
	}
	// The scrape of /metrics counts the four outcomes: ada, bob (after his
	// deferral) and carol (after two retries) acked; dave retried twice,
	// then dead-lettered as exhausted.
	settled := map[string]string{}
	for _, line := range rep.Settled {
		outcome := between(line, `queuey_outcome="`, `"`) + "/" + between(line, `queuey_reason="`, `"`)
		settled[outcome] = line[strings.LastIndex(line, " ")+1:]
	}
	if want := map[string]string{"acked/": "3", "deferred/": "1", "retried/": "4", "dead_lettered/exhausted": "1"}; fmt.Sprint(settled) != fmt.Sprint(want) {
		t.Errorf("settled counts scraped from /metrics = %v, want %v (lines: %q)", settled, want, rep.Settled)
	}
	for _, line := range []string{"What happened:", "sent", "dead-lettered", "deferred by 1s", "retried with backoff", "<- hold queue"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q", line)
		}
	}
}

// between is the text of s after the first from, up to the next to.
func between(s, from, to string) string {
	_, after, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(after, to)
	return v
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
