package brokertest

import (
	"regexp"
	"testing"
)

func TestPrefixIsUniqueAndNamesItsTest(t *testing.T) {
	t.Parallel()
	a, b := Prefix(t, "qt"), Prefix(t, "qt")
	if a == b {
		t.Fatalf("two prefixes are both %q", a)
	}
	if !regexp.MustCompile(`^qt-[0-9a-f]{8}-prefixisuniqueandnamesitstest$`).MatchString(a) {
		t.Fatalf("Prefix = %q", a)
	}
	t.Run("Sub Test/with:odd chars and a name longer than forty characters", func(t *testing.T) {
		p := Prefix(t, "x")
		if !regexp.MustCompile(`^x-[0-9a-f]{8}-[a-z0-9-]{1,40}$`).MatchString(p) || p[len(p)-1] == '-' {
			t.Fatalf("Prefix = %q", p)
		}
	})
}

func TestFromEnv(t *testing.T) {
	t.Setenv("AMQP_URL", "")
	t.Setenv("QUEUEY_ENDPOINT", "http://broker:15672/")
	t.Setenv("QUEUEY_USERNAME", "u")
	t.Setenv("QUEUEY_PASSWORD", "")
	got := FromEnv()
	want := Env{AMQPURL: DefaultAMQPURL, Endpoint: "http://broker:15672", Username: "u", Password: DefaultPassword}
	if got != want {
		t.Fatalf("FromEnv = %+v, want %+v", got, want)
	}
}
