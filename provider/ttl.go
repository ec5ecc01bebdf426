package provider

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
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

// The text of message_ttl. The provider writes durations in two forms: its
// diagnostics use topology.FormatDuration, days and spaces included ("50d",
// "49d 17h 2m 47s 295ms"), and an import writes formatTTL's hours, minutes,
// seconds and milliseconds ("1m30s"). parseTTL reads both, and Go's
// duration syntax, so that a value copied from an error or from the state
// is a valid configuration.

// ttlUnits are the units parseTTL knows: Go's, and days.
var ttlUnits = map[string]bool{"ns": true, "us": true, "µs": true, "μs": true, "ms": true, "s": true, "m": true, "h": true, "d": true}

// ttlSyntax is what a message_ttl error says about writing one.
const ttlSyntax = `write numbers with units (ms, s, m, h or d), such as "90s", "15m", "24h", "7d", "1h30m" or "49d 17h 2m 47s 295ms"`

// parseTTL reads message_ttl: one or more parts, each a number (a fraction
// allowed, as in "1.5h") and a unit of ttlUnits, written together ("1h30m")
// or apart ("1h 30m"), with an optional sign in front; "0" alone is zero.
// A sum beyond what a time.Duration holds (about 106,751 days) is refused.
// What it accepts beyond Go's syntax is days and spaces between parts.
func parseTTL(s string) (time.Duration, error) {
	notDuration := func(why string) error {
		return fmt.Errorf("%q is not a duration: %s; %s", s, why, ttlSyntax)
	}
	rest := strings.TrimSpace(s)
	negative := false
	if rest != "" && (rest[0] == '-' || rest[0] == '+') {
		negative, rest = rest[0] == '-', rest[1:]
	}
	if rest == "0" {
		return 0, nil
	}
	if rest == "" {
		return 0, notDuration("it holds no number")
	}
	var total time.Duration
	for first := true; rest != ""; first = false {
		if trimmed := strings.TrimLeft(rest, " \t"); trimmed != rest {
			if first {
				return 0, notDuration("a sign must be followed by a number")
			}
			rest = trimmed
		}
		number := rest[:len(rest)-len(strings.TrimLeft(rest, "0123456789."))]
		rest = rest[len(number):]
		unit := rest[:len(rest)-len(strings.TrimLeft(rest, "abcdefghijklmnopqrstuvwxyzµμ"))]
		rest = rest[len(unit):]
		if strings.Trim(number, ".") == "" || strings.Count(number, ".") > 1 {
			switch {
			case number == "" && unit == "":
				return 0, notDuration(fmt.Sprintf("%q is neither a number nor a unit", firstRune(rest)))
			case strings.Trim(number, ".") != "":
				return 0, notDuration(fmt.Sprintf("%q is not a number", number))
			case first && rest == "":
				return 0, notDuration("it has no number")
			}
			return 0, notDuration(fmt.Sprintf("%q has no number before its unit", number+unit))
		}
		known := ttlUnits[unit]
		if unit == "" {
			return 0, notDuration(fmt.Sprintf("%q has no unit", number))
		}
		if !known {
			return 0, notDuration(fmt.Sprintf("%q is not a unit", unit))
		}
		part, ok := ttlPart(number, unit)
		if !ok || part > math.MaxInt64-total {
			return 0, fmt.Errorf("%q is too long a duration: RabbitMQ's limit is %d ms (%s)", s, topology.MaxMessageTTL,
				topology.FormatDuration(time.Duration(topology.MaxMessageTTL)*time.Millisecond))
		}
		total += part
	}
	if negative {
		total = -total
	}
	return total, nil
}

// formatTTL writes a TTL the way an import puts it in state: hours, minutes,
// seconds and milliseconds with zero parts left out ("24h", "1m30s",
// "1s500ms"), which parseTTL reads back to the same value.
func formatTTL(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	var b strings.Builder
	for _, p := range []struct {
		unit   time.Duration
		suffix string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if n := d / p.unit; n > 0 {
			b.WriteString(strconv.FormatInt(int64(n), 10))
			b.WriteString(p.suffix)
			d -= n * p.unit
		}
	}
	return b.String()
}

// ttlPart is number (digits with at most one '.') in unit, false when it
// overflows a time.Duration. Go's parser reads it, a day as 24 hours, so
// that every text Go reads means here what it means there.
func ttlPart(number, unit string) (time.Duration, bool) {
	if unit != "d" {
		d, err := time.ParseDuration(number + unit)
		return d, err == nil
	}
	h, err := time.ParseDuration(number + "h")
	if err != nil || h > math.MaxInt64/24 {
		return 0, false
	}
	return 24 * h, true
}

// firstRune is the first character of s, for an error about it.
func firstRune(s string) string {
	for _, r := range s {
		return string(r)
	}
	return s
}
