package queuey

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const testRuntimeConfig = `{"version":1,"vhost":"/","prefix":"app","queues":[` +
	`{"name":"emails","work_queue":"app.emails","dead_queue":"app.emails.dead","max_priority":10,"message_ttl_ms":0,"durable":true},` +
	`{"name":"reports","work_queue":"app.reports","dead_queue":"app.reports.dead","max_priority":0,"message_ttl_ms":86400000,"durable":false}]}`

func TestParseQueueSet(t *testing.T) {
	set, err := ParseQueueSet([]byte(testRuntimeConfig))
	if err != nil {
		t.Fatal(err)
	}
	want := []QueueConfig{
		{Name: "emails", MaxPriority: 10},
		{Name: "reports", MaxPriority: NoPriority, MessageTTL: 24 * time.Hour, NonDurable: true},
	}
	if set.Prefix != "app" || len(set.Queues) != 2 || set.Queues[0] != want[0] || set.Queues[1] != want[1] {
		t.Fatalf("ParseQueueSet = %+v, want prefix app and %+v", set, want)
	}
	// The set declares what the config says: the same topology back.
	back := set.topology()
	if back.Queues[0].MaxPriority != 10 || back.Queues[1].MaxPriority != 0 || back.Queues[1].Durable {
		t.Fatalf("topology of the parsed set = %+v", back)
	}
}

func TestLoadQueueSet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "set.json")
	if err := os.WriteFile(path, []byte(testRuntimeConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{testRuntimeConfig, path} {
		t.Setenv("QUEUEY_TEST_SET", v)
		set, err := LoadQueueSet("QUEUEY_TEST_SET")
		if err != nil || set.Prefix != "app" || len(set.Queues) != 2 {
			t.Fatalf("LoadQueueSet from %.20q = %+v, %v", v, set, err)
		}
	}
	t.Setenv("QUEUEY_TEST_SET", "")
	if _, err := LoadQueueSet("QUEUEY_TEST_SET"); err == nil || !strings.Contains(err.Error(), "is not set") {
		t.Fatalf("LoadQueueSet of an empty variable = %v, want it to say it is not set", err)
	}
	t.Setenv("QUEUEY_TEST_SET", filepath.Join(t.TempDir(), "missing.json"))
	if _, err := LoadQueueSet("QUEUEY_TEST_SET"); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("LoadQueueSet of a missing file = %v, want it to name the file", err)
	}
	t.Setenv("QUEUEY_TEST_SET", `{"version":1,"prefix":"app","queues":[]}`)
	if _, err := LoadQueueSet("QUEUEY_TEST_SET"); err == nil || !strings.Contains(err.Error(), "QUEUEY_TEST_SET") {
		t.Fatalf("LoadQueueSet of a bad set = %v, want it to name the variable", err)
	}
}
