package provider

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

func TestTTLSemanticEquals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		a, b  string
		equal bool
	}{
		{"90s", "1m30s", true},
		{"1m30s", "90000ms", true},
		{"24h", "1440m", true},
		{"0s", "0ms", true},
		{"90s", "91s", false},
		{"90s", "1m30s1ms", false},
		{"soon", "soon", false}, // not a duration: the framework's own equality decides
		{"soon", "90s", false},
	} {
		got, diags := ttlString(c.a).StringSemanticEquals(ctx, ttlString(c.b))
		if diags.HasError() || got != c.equal {
			t.Errorf("%q semantically equals %q = %t (%v), want %t", c.a, c.b, got, diags, c.equal)
		}
	}
	if _, diags := ttlString("90s").StringSemanticEquals(ctx, types.StringValue("90s")); !diags.HasError() {
		t.Error("a plain string was compared without an error")
	}
}

// TestKeepEquivalentTTL pins the plan side of the message_ttl spelling: the
// state's text is planned when the configuration means the same duration,
// the configuration's otherwise.
func TestKeepEquivalentTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	str := func(s string) types.String {
		if s == "" {
			return types.StringNull()
		}
		return types.StringValue(s)
	}
	for _, c := range []struct {
		state, plan, want string
	}{
		{"1m30s", "90s", "1m30s"}, // imported, configured as "90s"
		{"90s", "1m30s", "90s"},   // configuration rewritten
		{"90s", "91s", "91s"},     // a change
		{"", "90s", "90s"},        // a new queue
		{"90s", "", ""},           // TTL removed
		{"90s", "soon", "soon"},   // invalid: validation reports it
	} {
		req := planmodifier.StringRequest{StateValue: str(c.state), PlanValue: str(c.plan), ConfigValue: str(c.plan)}
		resp := &planmodifier.StringResponse{PlanValue: req.PlanValue}
		keepEquivalentTTL{}.PlanModifyString(ctx, req, resp)
		if resp.Diagnostics.HasError() || !resp.PlanValue.Equal(str(c.want)) {
			t.Errorf("state %q, configuration %q: planned %v (%v), want %q", c.state, c.plan, resp.PlanValue, resp.Diagnostics, c.want)
		}
	}
	unknown := planmodifier.StringRequest{StateValue: str("90s"), PlanValue: types.StringUnknown()}
	resp := &planmodifier.StringResponse{PlanValue: unknown.PlanValue}
	keepEquivalentTTL{}.PlanModifyString(ctx, unknown, resp)
	if !resp.PlanValue.IsUnknown() {
		t.Errorf("an unknown configuration was planned as %v", resp.PlanValue)
	}
}

func TestParseTTL(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for s, want := range map[string]time.Duration{
		// Go's syntax, as before.
		"90s": 90 * time.Second, "1m30s": 90 * time.Second, "1500ms": 1500 * time.Millisecond,
		"1.5h": 90 * time.Minute, "0": 0, "0s": 0, "-5s": -5 * time.Second, "1500us": 1500 * time.Microsecond,
		"2µs": 2 * time.Microsecond, "+3m": 3 * time.Minute, "4294967295ms": 4294967295 * time.Millisecond,
		// Days, as the provider's errors print them.
		"50d":                  50 * day,
		"1d":                   day,
		"1.5d":                 36 * time.Hour,
		"7d12h":                7*day + 12*time.Hour,
		"49d 17h 2m 47s 295ms": 4294967295 * time.Millisecond,
		"24d 20h 31m 23s":      2147483 * time.Second,
		"1m 500ms":             time.Minute + 500*time.Millisecond,
		"1h  30m":              90 * time.Minute,
		"-1d 2h":               -26 * time.Hour,
		" 90s ":                90 * time.Second,
		"106751d":              106751 * day,
	} {
		got, err := parseTTL(s)
		if err != nil || got != want {
			t.Errorf("parseTTL(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
}

func TestParseTTLRefuses(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]string{
		"":                      `"" is not a duration: it holds no number`,
		"-":                     `"-" is not a duration: it holds no number`,
		"ninety seconds":        `"ninety" has no number before its unit`,
		"90":                    `"90" has no unit`,
		"1h30":                  `"30" has no unit`,
		"5 d":                   `"5" has no unit`,
		"5x":                    `"x" is not a unit`,
		"5D":                    `"5" has no unit`,
		"5s!":                   `"!" is neither a number nor a unit`,
		"1..5s":                 `"1..5" is not a number`,
		"1.5.5h":                `"1.5.5" is not a number`,
		"abc":                   `"abc" is not a duration: it has no number;`,
		"1h .s":                 `".s" has no number before its unit`,
		"µs":                    `it has no number`,
		"- 5s":                  `a sign must be followed by a number`,
		"106752d":               `"106752d" is too long a duration: RabbitMQ's limit is 4294967295 ms (49d 17h 2m 47s 295ms)`,
		"106751d 1d":            `is too long a duration`,
		"99999999999999999999h": `is too long a duration`,
	} {
		got, err := parseTTL(s)
		if err == nil {
			t.Errorf("parseTTL(%q) = %v, want an error saying %q", s, got, want)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("parseTTL(%q) failed with %q, want it to say %q", s, err, want)
		}
		if !strings.Contains(err.Error(), `"49d 17h 2m 47s 295ms"`) && !strings.Contains(err.Error(), "too long") {
			t.Errorf("parseTTL(%q) failed with %q, which shows no way to write one", s, err)
		}
	}
}

// TestParseTTLReadsWhatTheProviderPrints pins that every duration the
// provider writes, in its diagnostics (topology.FormatDuration: "50d",
// "49d 17h 2m 47s 295ms") or in state after an import (formatTTL:
// "1193h2m47s295ms"), parses back to the same duration.
func TestParseTTLReadsWhatTheProviderPrints(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	durations := []time.Duration{
		0, time.Millisecond, 999 * time.Millisecond, time.Second, 90 * time.Second, time.Hour, day, 50 * day,
		day + time.Millisecond, 49*day + 17*time.Hour + 2*time.Minute + 47*time.Second + 295*time.Millisecond,
		time.Duration(topology.MaxMessageTTL) * time.Millisecond, time.Duration(topology.MaxMessageTTL+1) * time.Millisecond,
		time.Duration(topology.MaxHoldTTL) * time.Millisecond, -90 * time.Second, -50 * day,
		1500 * time.Microsecond, time.Second + 1, 106751 * day,
	}
	rng := rand.New(rand.NewPCG(15, 15))
	for range 2000 {
		durations = append(durations, time.Duration(rng.Int64N(topology.MaxMessageTTL+1))*time.Millisecond)
	}
	for _, d := range durations {
		forms := []string{topology.FormatDuration(d)}
		if d >= 0 && d%time.Millisecond == 0 {
			forms = append(forms, formatTTL(d)) // an import's form: only whole milliseconds reach it
		}
		for _, s := range forms {
			back, err := parseTTL(s)
			if err != nil || back != d {
				t.Errorf("parseTTL(%q) = %v, %v; want %v, the duration it was written from", s, back, err, d)
			}
		}
	}
	// The forms the issue quotes, as the provider prints them.
	if s := topology.FormatDuration(50 * day); s != "50d" {
		t.Errorf("FormatDuration(50 days) = %q, want \"50d\"", s)
	}
	if s := topology.FormatDuration(time.Duration(topology.MaxMessageTTL) * time.Millisecond); s != "49d 17h 2m 47s 295ms" {
		t.Errorf("FormatDuration(MaxMessageTTL) = %q, want \"49d 17h 2m 47s 295ms\"", s)
	}
}

// TestTTLSemanticEqualsAcrossForms: a TTL written in days is the same queue
// argument as the same duration in hours.
func TestTTLSemanticEqualsAcrossForms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range [][2]string{{"50d", "1200h"}, {"49d 17h 2m 47s 295ms", "1193h2m47s295ms"}, {"1d 12h", "36h"}} {
		got, diags := ttlString(c[0]).StringSemanticEquals(ctx, ttlString(c[1]))
		if diags.HasError() || !got {
			t.Errorf("%q semantically equals %q = %t (%v), want true", c[0], c[1], got, diags)
		}
	}
}
