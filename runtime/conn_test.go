package queuey

import (
	"slices"
	"strings"
	"testing"
)

// A URL with several hosts is one URL per host, with the same user,
// password, vhost and query; one host is the URL as it is; an empty entry
// or a host that does not parse is an error that never shows the password.
func TestSplitHosts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", []string{"amqp://guest:guest@127.0.0.1:5672/"}},
		{"amqp://u:p@h1:5691,h2:5692,h3/v?heartbeat=5", []string{
			"amqp://u:p@h1:5691/v?heartbeat=5", "amqp://u:p@h2:5692/v?heartbeat=5", "amqp://u:p@h3/v?heartbeat=5"}},
		{"amqps://h1,h2", []string{"amqps://h1", "amqps://h2"}},
		// A comma or an @ in the password stays in the password.
		{"amqp://u:a,b@c@h1,h2/", []string{"amqp://u:a,b@c@h1/", "amqp://u:a,b@c@h2/"}},
	} {
		got, err := splitHosts(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("splitHosts(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"amqp://u:secret@h1,,h2/", "amqp://u:secret@h1,h2:notaport/"} {
		_, err := splitHosts(in)
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("splitHosts(%q) = %v; want an error without the password", in, err)
		}
	}
}
