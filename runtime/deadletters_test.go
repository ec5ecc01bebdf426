package queuey

import (
	"strings"
	"testing"
	"time"
)

func TestDeadFilterMatches(t *testing.T) {
	now := time.Now()
	job := DeadLetterInfo{JobID: "a", Kind: "mail", Reason: "fatal error: no such address", DeadAt: now.Add(-2 * time.Hour)}
	bad := DeadLetterInfo{JobID: "m1", Malformed: true, Reason: ReasonMalformedEnvelope}
	unknownAge := DeadLetterInfo{JobID: "b", Kind: "mail", Reason: "x"}
	for _, tc := range []struct {
		name string
		f    DeadFilter
		d    DeadLetterInfo
		want bool
	}{
		{"zero filter takes a job", DeadFilter{}, job, true},
		{"zero filter takes a malformed one", DeadFilter{}, bad, true},
		{"kind", DeadFilter{Kinds: []string{"sms", "mail"}}, job, true},
		{"other kind", DeadFilter{Kinds: []string{"sms"}}, job, false},
		{"a kind never takes a malformed one", DeadFilter{Kinds: []string{""}}, bad, false},
		{"reason is a substring", DeadFilter{Reasons: []string{"no such"}}, job, true},
		{"reason is case-sensitive", DeadFilter{Reasons: []string{"No such"}}, job, false},
		{"malformed by reason", DeadFilter{Reasons: []string{ReasonMalformedEnvelope}}, bad, true},
		{"id", DeadFilter{IDs: []string{"a"}}, job, true},
		{"other id", DeadFilter{IDs: []string{"b"}}, job, false},
		{"older", DeadFilter{OlderThan: time.Hour}, job, true},
		{"not old enough", DeadFilter{OlderThan: 3 * time.Hour}, job, false},
		{"unknown age passes", DeadFilter{OlderThan: time.Hour}, unknownAge, true},
		{"all must pass", DeadFilter{Kinds: []string{"mail"}, IDs: []string{"b"}}, job, false},
	} {
		if got := tc.f.matches(tc.d, now); got != tc.want {
			t.Errorf("%s: matches = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDeadFilterValidate(t *testing.T) {
	if err := (DeadFilter{OlderThan: -time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("a negative age: %v", err)
	}
	if err := (DeadFilter{Reasons: []string{""}}).Validate(); err == nil || !strings.Contains(err.Error(), "leave the reason out") {
		t.Errorf("an empty reason: %v", err)
	}
	if err := (DeadFilter{Kinds: []string{"mail"}, OlderThan: time.Hour}).Validate(); err != nil {
		t.Errorf("a good filter: %v", err)
	}
}

func TestDeadLetterAge(t *testing.T) {
	now := time.Now()
	if a := (DeadLetterInfo{DeadAt: now.Add(-time.Minute), EnqueuedAt: now.Add(-time.Hour)}).Age(now); a != time.Minute {
		t.Errorf("age from dead-lettered-at = %v, want 1m", a)
	}
	if a := (DeadLetterInfo{EnqueuedAt: now.Add(-time.Hour)}).Age(now); a != time.Hour {
		t.Errorf("age from enqueued-at = %v, want 1h", a)
	}
	if a := (DeadLetterInfo{}).Age(now); a != 0 {
		t.Errorf("unknown age = %v, want 0", a)
	}
}
