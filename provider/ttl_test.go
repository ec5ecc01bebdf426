package provider

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
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
