package provider

import (
	"context"
	"reflect"
	"sort"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// The hand-made conversions of the queues map must give what the
// framework's reflection gives, values and diagnostics alike.
func TestQueuesConversionMatchesFramework(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	queues := map[string]queueModel{
		"emails": withComputed("app", "emails", queueModel{
			MaxPriority: types.Int64Value(10), MessageTTL: ttlString("90s"),
			Durable: types.BoolValue(true), QueueType: types.StringValue("classic"),
		}),
		"reports": withComputed("app", "reports", queueModel{
			MaxPriority: types.Int64Unknown(), MessageTTL: ttlNull(),
			Durable: types.BoolNull(), QueueType: types.StringValue("quorum"),
		}),
		"gone": {
			MaxPriority: types.Int64Value(0), MessageTTL: ttlNull(), Durable: types.BoolValue(false),
			QueueType: types.StringNull(), Name: types.StringNull(), DeadName: types.StringNull(),
			Arguments: types.MapNull(types.Int64Type), DeadArguments: types.MapUnknown(types.Int64Type),
		},
	}
	want, wantDiags := types.MapValueFrom(ctx, queueObjectType, queues)
	got, gotDiags := encodeQueues(ctx, queues)
	if !got.Equal(want) || !reflect.DeepEqual(gotDiags, wantDiags) {
		t.Fatalf("encodeQueues = %v, %v; MapValueFrom = %v, %v", got, gotDiags, want, wantDiags)
	}

	// A zero argument map has no element type: both report it alike.
	// Which of the two zero maps the framework names first varies from
	// run to run (it walks the object's attributes in map order: 41 of
	// 200 runs differed when the paths were compared), so the check is
	// on the value, the number of errors and their summaries.
	bad := map[string]queueModel{"x": {MessageTTL: ttlNull()}}
	want, wantDiags = types.MapValueFrom(ctx, queueObjectType, bad)
	got, gotDiags = encodeQueues(ctx, bad)
	summaries := func(d diag.Diagnostics) []string {
		var out []string
		for _, e := range d.Errors() {
			out = append(out, e.Summary())
		}
		sort.Strings(out)
		return out
	}
	if !got.Equal(want) || !gotDiags.HasError() || !reflect.DeepEqual(summaries(gotDiags), summaries(wantDiags)) {
		t.Fatalf("encodeQueues(zero maps) = %v, %v; MapValueFrom = %v, %v", got, gotDiags, want, wantDiags)
	}

	unknownElem := types.MapValueMust(queueObjectType, map[string]attr.Value{
		"a": mustMap(t, ctx, queues).Elements()["emails"],
		"b": types.ObjectUnknown(queueObjectType.AttrTypes),
	})
	for name, m := range map[string]types.Map{
		"known":           mustMap(t, ctx, queues),
		"unknown element": unknownElem,
		"null":            types.MapNull(queueObjectType),
		"unknown":         types.MapUnknown(queueObjectType),
	} {
		wantQ, gotQ := map[string]queueModel{}, map[string]queueModel{}
		wantD := m.ElementsAs(ctx, &wantQ, false)
		gotD := decodeQueues(ctx, m, &gotQ)
		if !reflect.DeepEqual(gotQ, wantQ) || !reflect.DeepEqual(gotD, wantD) {
			t.Errorf("%s: decodeQueues = %v, %v; ElementsAs = %v, %v", name, gotQ, gotD, wantQ, wantD)
		}
	}
}

func mustMap(t *testing.T, ctx context.Context, queues map[string]queueModel) types.Map {
	t.Helper()
	m, diags := types.MapValueFrom(ctx, queueObjectType, queues)
	if diags.HasError() {
		t.Fatal(diags)
	}
	return m
}
