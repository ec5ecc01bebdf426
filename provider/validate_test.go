package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Regression: validateSet used to rewrite the topology package's message,
// which it got for the clamped priority 256, by replacing the first "256" in
// it with the configured value, so that queue "v256" with max_priority = 300
// was reported as `queue "v300": max priority 256 is out of range`.
func TestMaxPriorityErrorNamesQueueV256AndValue300(t *testing.T) {
	t.Parallel()
	queue := types.ObjectValueMust(queueObjectType.AttrTypes, map[string]attr.Value{
		"max_priority": types.Int64Value(300), "message_ttl": ttlNull(), "durable": types.BoolNull(), "queue_type": types.StringNull(),
		"name": types.StringNull(), "dead_name": types.StringNull(),
		"arguments": types.MapNull(types.Int64Type), "dead_arguments": types.MapNull(types.Int64Type),
	})
	cfg := queueSetModel{
		Prefix: types.StringValue("app"),
		Queues: types.MapValueMust(queueObjectType, map[string]attr.Value{"v256": queue}),
	}
	diags := validateSet(context.Background(), cfg)
	if diags.ErrorsCount() != 1 {
		t.Fatalf("%d errors %v, want 1", diags.ErrorsCount(), diags)
	}
	e := diags.Errors()[0]
	want := `Queue "v256": max_priority 300 is out of range`
	if e.Summary() != "Invalid Max Priority" || !strings.HasPrefix(e.Detail(), want) {
		t.Errorf("error %q: %q, want %q: detail starting %q", e.Summary(), e.Detail(), "Invalid Max Priority", want)
	}
	if p := e.(diag.DiagnosticWithPath).Path(); !p.Equal(path.Root("queues").AtMapKey("v256")) {
		t.Errorf("error at %s, want queues[\"v256\"]", p)
	}
}
