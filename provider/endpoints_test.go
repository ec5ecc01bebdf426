package provider

import (
	"slices"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/amqphosts"
)

func TestParseEndpoints(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		setting string
		hosts   []string
	}{
		{"http://127.0.0.1:15672/", []string{"127.0.0.1:15672"}},
		{"https://rabbit.example.com:15671", []string{"rabbit.example.com:15671"}},
		{"http://n1:15672,http://n2:15672,http://n3:15672", []string{"n1:15672", "n2:15672", "n3:15672"}},
		// Spaces around an entry and trailing slashes are fine.
		{"https://n1:15671/ , https://n2:15671", []string{"n1:15671", "n2:15671"}},
		{"http://n1/admin/,http://n2/admin", []string{"n1", "n2"}},
	} {
		urls, problem := parseEndpoints(c.setting)
		var hosts []string
		for _, u := range urls {
			hosts = append(hosts, u.Host)
		}
		if problem != "" || !slices.Equal(hosts, c.hosts) {
			t.Errorf("parseEndpoints(%q) = %q, %q; want %q", c.setting, hosts, problem, c.hosts)
		}
	}

	for _, c := range []struct {
		setting string
		says    []string
	}{
		// One URL: the diagnostic as it was before endpoint took a list.
		{"ftp://rabbit:15672", []string{`The management endpoint "ftp://rabbit:15672" is not an http or https URL. Set endpoint (or QUEUEY_ENDPOINT) to a URL such as http://127.0.0.1:15672.`}},
		{"http://n1:15672,https://n2:15671", []string{"mixes schemes", `entry 1, "http://n1:15672", uses http`, `entry 2, "https://n2:15671", uses https`, "every entry with https://"}},
		{"https://n1:15671,https://n2:15671,http://n3:15672", []string{"mixes schemes", "entry 3"}},
		{"http://n1:15672,,http://n2:15672", []string{"empty entry (entry 2)", "separated by single commas", exampleEndpoints}},
		{"http://n1:15672,", []string{"empty entry (entry 2)"}},
		{",http://n1:15672", []string{"empty entry (entry 1)"}},
		{"http://n1:15672, ,http://n2:15672", []string{"empty entry (entry 2)"}},
		{"http://n1:15672,n2:15672", []string{`Entry 2 of the management endpoint list, "n2:15672", is not an http or https URL`, exampleEndpoints}},
		{"http://n1/a,http://n2/b", []string{"mixes paths", "same path"}},
	} {
		urls, problem := parseEndpoints(c.setting)
		if problem == "" {
			t.Errorf("parseEndpoints(%q) = %v, want it refused", c.setting, urls)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(problem, s) {
				t.Errorf("parseEndpoints(%q) says %q; want it to say %q", c.setting, problem, s)
			}
		}
	}
}

func TestDefaultAMQPURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		endpoint, want string
	}{
		{"http://127.0.0.1:15672/", "amqp://u:p%40ss@127.0.0.1:5672/"},
		{"https://rabbit.example.com:15671", "amqps://u:p%40ss@rabbit.example.com:5671/"},
		{"http://[::1]:15672", "amqp://u:p%40ss@[::1]:5672/"},
		{"http://n1:15672,http://n2:15672,http://n3:15672", "amqp://u:p%40ss@n1:5672,n2:5672,n3:5672/"},
		{"https://n1:15671,https://n2:15671", "amqps://u:p%40ss@n1:5671,n2:5671/"},
	} {
		urls, problem := parseEndpoints(c.endpoint)
		if problem != "" {
			t.Fatal(problem)
		}
		got := defaultAMQPURL(urls, "u", "p@ss")
		if got != c.want {
			t.Errorf("defaultAMQPURL(%s) = %s, want %s", c.endpoint, got, c.want)
		}
		// It is in the form migrations (and the runtime) dial: one URL
		// per endpoint, each one amqp091-go reads.
		each, err := amqphosts.Split(got)
		if err != nil || len(each) != len(urls) {
			t.Errorf("amqphosts.Split(%s) = %q, %v; want %d URLs", got, each, err, len(urls))
		}
		for i, u := range each {
			uri, err := amqp.ParseURI(u)
			if err != nil || uri.Host != urls[i].Hostname() || uri.Password != "p@ss" {
				t.Errorf("host %d of %s: %+v, %v", i+1, got, uri, err)
			}
		}
	}
}
