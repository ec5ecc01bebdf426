package queuey

import (
	"testing"
	"time"
)

func TestUnroutableRetryDefaults(t *testing.T) {
	t.Parallel()
	if got := (*ProducerOptions)(nil).resolved().UnroutableRetry; got != 5*time.Second {
		t.Errorf("default UnroutableRetry = %v, want 5s", got)
	}
	if got := (&ProducerOptions{UnroutableRetry: -1}).resolved().UnroutableRetry; got != -1 {
		t.Errorf("a negative UnroutableRetry became %v; it disables the retry", got)
	}
}

// TestProducerRetriesUnroutableOnlyForItsSet pins which queues a publish
// returned as unroutable is retried for: the set's work and dead-letter
// queues, which exist unless they are being migrated.
func TestProducerRetriesUnroutableOnlyForItsSet(t *testing.T) {
	t.Parallel()
	set := QueueSet{Prefix: "p", Queues: []QueueConfig{{Name: "a"}}}
	p := newProducer(nil, &set, "p", nil, nil)
	for name, want := range map[string]bool{"p.a": true, "p.a.dead": true, "p.b": false, "p.b.dead": false, "p.a.deferred.1000": false, "p.a.migrating": false} {
		if got := p.declared(name); got != want {
			t.Errorf("declared(%q) = %v, want %v", name, got, want)
		}
	}
}
