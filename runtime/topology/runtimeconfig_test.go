package topology

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestRuntimeConfigRoundTrip(t *testing.T) {
	s := Set{Prefix: "app", Queues: []Queue{
		{Name: "emails", MaxPriority: 10, Durable: true},
		{Name: "reports", MessageTTL: 24 * time.Hour},
	}}
	data, err := json.Marshal(NewRuntimeConfig("/", s))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":1,"vhost":"/","prefix":"app","queues":[` +
		`{"name":"emails","work_queue":"app.emails","dead_queue":"app.emails.dead","max_priority":10,"message_ttl_ms":0,"durable":true},` +
		`{"name":"reports","work_queue":"app.reports","dead_queue":"app.reports.dead","max_priority":0,"message_ttl_ms":86400000,"durable":false}]}`
	if string(data) != want {
		t.Fatalf("runtime config\n got %s\nwant %s", data, want)
	}
	c, err := ParseRuntimeConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	got := c.Set()
	if got.Prefix != "app" || len(got.Queues) != 2 || got.Queues[0] != s.Queues[0] || got.Queues[1] != s.Queues[1] {
		t.Fatalf("parsed %+v, want %+v", got, s)
	}
}

func TestParseRuntimeConfigRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`not json`, "is not JSON"},
		{`{"prefix":"a","queues":[{"name":"q"}]}`, "has no version"},
		{`{"version":2,"prefix":"a","queues":[{"name":"q"}]}`, "upgrade the runtime"},
		{`{"version":1,"prefix":"a","queues":[{"name":"q","work_queue":"b.q"}]}`, "edited by hand"},
		{`{"version":1,"prefix":"a.","queues":[{"name":"q"}]}`, "prefix"},
		{`{"version":1,"prefix":"a","queues":[]}`, "no queues"},
		{`{"version":1,"prefix":"a","queues":[{"name":"q","message_ttl_ms":-1}]}`, "out of range"},
	} {
		_, err := ParseRuntimeConfig([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRuntimeConfig(%s) = %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}
