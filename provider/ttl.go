package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// message_ttl is text that means a number of milliseconds: "90s" and
// "1m30s" are the same queue argument. The type below says so to the
// framework, so that a value written one way is not replaced by the same
// value written another way; the plan modifier after it does the same for
// plans, where the framework does not apply semantic equality.

var (
	_ basetypes.StringTypable                    = ttlType{}
	_ basetypes.StringValuableWithSemanticEquals = ttlValue{}
	_ planmodifier.String                        = keepEquivalentTTL{}
)

// ttlType is the type of message_ttl: a string holding a duration.
type ttlType struct {
	basetypes.StringType
}

func (t ttlType) Equal(o attr.Type) bool {
	other, ok := o.(ttlType)
	return ok && t.StringType.Equal(other.StringType)
}

func (t ttlType) String() string { return "ttlType" }

func (t ttlType) ValueFromString(_ context.Context, in basetypes.StringValue) (basetypes.StringValuable, diag.Diagnostics) {
	return ttlValue{StringValue: in}, nil
}

func (t ttlType) ValueFromTerraform(ctx context.Context, in tftypes.Value) (attr.Value, error) {
	v, err := t.StringType.ValueFromTerraform(ctx, in)
	if err != nil {
		return nil, err
	}
	s, ok := v.(basetypes.StringValue)
	if !ok {
		return nil, fmt.Errorf("unexpected value type %T", v)
	}
	return ttlValue{StringValue: s}, nil
}

func (t ttlType) ValueType(context.Context) attr.Value { return ttlValue{} }

// ttlValue is a message_ttl value.
type ttlValue struct {
	basetypes.StringValue
}

// ttlString is a known message_ttl.
func ttlString(s string) ttlValue { return ttlValue{StringValue: basetypes.NewStringValue(s)} }

// ttlNull is a message_ttl left out: messages do not expire.
func ttlNull() ttlValue { return ttlValue{StringValue: basetypes.NewStringNull()} }

func (v ttlValue) Equal(o attr.Value) bool {
	other, ok := o.(ttlValue)
	return ok && v.StringValue.Equal(other.StringValue)
}

func (v ttlValue) Type(context.Context) attr.Type { return ttlType{} }

// StringSemanticEquals reports whether two message_ttl texts are the same
// duration. The framework calls it after Read, with the prior state, and
// after Create and Update, with the plan, and keeps the earlier text when
// it is: a state that says "90s" keeps saying so while the broker has
// 90000 ms. Text that is not a duration equals nothing but itself.
func (v ttlValue) StringSemanticEquals(_ context.Context, newValuable basetypes.StringValuable) (bool, diag.Diagnostics) {
	var diags diag.Diagnostics
	other, ok := newValuable.(ttlValue)
	if !ok {
		diags.AddError("Semantic Equality Check Error",
			fmt.Sprintf("A message_ttl was compared with a value of another type (%T). This is a bug in the provider; please report it.", newValuable))
		return false, diags
	}
	a, errA := parseTTL(v.ValueString())
	b, errB := parseTTL(other.ValueString())
	return errA == nil && errB == nil && a == b, diags
}

// keepEquivalentTTL plans the message_ttl in state when the configuration
// writes the same duration another way, so that "1m30s" in state (an
// import writes that) against "90s" in the configuration is no change, and
// neither is a configuration rewritten from "90s" to "1m30s". The framework
// applies semantic equality to the state that Read, Create and Update
// return, never to a plan; Terraform lets a plan keep the prior value of a
// configured attribute in place of the configuration's for this purpose.
type keepEquivalentTTL struct{}

func (m keepEquivalentTTL) Description(context.Context) string {
	return "Keeps the message_ttl in state when the configuration writes the same duration another way."
}

func (m keepEquivalentTTL) MarkdownDescription(ctx context.Context) string {
	return m.Description(ctx)
}

func (m keepEquivalentTTL) PlanModifyString(ctx context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if req.StateValue.IsNull() || req.StateValue.IsUnknown() || req.PlanValue.IsNull() || req.PlanValue.IsUnknown() {
		return
	}
	equal, diags := ttlValue{req.StateValue}.StringSemanticEquals(ctx, ttlValue{req.PlanValue})
	resp.Diagnostics.Append(diags...)
	if equal {
		resp.PlanValue = req.StateValue
	}
}
