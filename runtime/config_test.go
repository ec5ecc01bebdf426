package queuey

import (
	"strings"
	"testing"
)

// Regression: a max priority above 255 was refused with topology's message,
// which offers 0 for a queue without priorities; in Go, 0 is the default of
// 10 and NoPriority disables them.
func TestQueueSetValidateMaxPriorityMessageSpeaksGo(t *testing.T) {
	t.Parallel()
	for _, prio := range []int{-2, 256, 1000} {
		err := QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "jobs", MaxPriority: prio}}}.Validate()
		if err == nil {
			t.Fatalf("max priority %d: no error", prio)
		}
		msg := err.Error()
		if !strings.Contains(msg, "0 for the default of 10") || !strings.Contains(msg, "NoPriority") || strings.Contains(msg, "0 for a queue without priorities") {
			t.Errorf("max priority %d: %q does not say what 0 and NoPriority mean in Go", prio, msg)
		}
	}
	for _, prio := range []int{NoPriority, 0, 1, 255} {
		if err := (QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "jobs", MaxPriority: prio}}}).Validate(); err != nil {
			t.Errorf("max priority %d: %v", prio, err)
		}
	}
}

func TestQueueConfigQuorum(t *testing.T) {
	ok := QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "q", QueueType: QueueTypeQuorum}, {Name: "c", QueueType: QueueTypeClassic}}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a quorum queue with the default priority: %v", err)
	}
	got := ok.topology().Queues
	if got[0].MaxPriority != 0 || got[0].Type != "quorum" || !got[0].Durable {
		t.Errorf("quorum queue resolved to %+v, want no priority, durable, quorum", got[0])
	}
	if got[1].MaxPriority != 10 || got[1].Type != "" {
		t.Errorf("classic queue resolved to %+v, want priority 10 and no type", got[1])
	}
	for _, bad := range []QueueConfig{
		{Name: "q", QueueType: QueueTypeQuorum, MaxPriority: 5},
		{Name: "q", QueueType: QueueTypeQuorum, NonDurable: true},
		{Name: "q", QueueType: "stream"},
	} {
		if err := (QueueSet{Prefix: "p", Queues: []QueueConfig{bad}}).Validate(); err == nil {
			t.Errorf("%+v was accepted", bad)
		}
	}
}
