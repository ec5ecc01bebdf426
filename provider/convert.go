package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// The queues map is converted by hand, not by the framework's reflection
// (ElementsAs, MapValueFrom): that reflection compiles a regular expression
// for every struct field it visits, eight per queue, and a no-change plan
// converts the map seven times; at 200 queues that was about a fifth of the
// provider's CPU (BENCHMARKS.md, "No-change plans"). Whatever the hand-made
// conversion does not expect (an unknown or null element, an attribute of
// another type) goes to the framework's, so errors read as before.

// decodeQueues is m.ElementsAs(ctx, out, false) for the queues map.
func decodeQueues(ctx context.Context, m types.Map, out *map[string]queueModel) diag.Diagnostics {
	if m.IsNull() || m.IsUnknown() {
		return m.ElementsAs(ctx, out, false)
	}
	elems := m.Elements()
	decoded := make(map[string]queueModel, len(elems))
	for name, e := range elems {
		q, ok := queueFromObject(e)
		if !ok {
			return m.ElementsAs(ctx, out, false)
		}
		decoded[name] = q
	}
	*out = decoded
	return nil
}

// queueFromObject is one element of the queues map as a queueModel, or false
// when it is not a known object of queueObjectType's attributes.
func queueFromObject(e attr.Value) (queueModel, bool) {
	o, ok := e.(types.Object)
	if !ok || o.IsNull() || o.IsUnknown() {
		return queueModel{}, false
	}
	a := o.Attributes()
	if len(a) != len(queueObjectType.AttrTypes) {
		return queueModel{}, false
	}
	var q queueModel
	var ok1, ok2, ok3, ok4, ok5, ok6, ok7, ok8 bool
	q.MaxPriority, ok1 = a["max_priority"].(types.Int64)
	q.MessageTTL, ok2 = a["message_ttl"].(ttlValue)
	q.Durable, ok3 = a["durable"].(types.Bool)
	q.QueueType, ok4 = a["queue_type"].(types.String)
	q.Name, ok5 = a["name"].(types.String)
	q.DeadName, ok6 = a["dead_name"].(types.String)
	q.Arguments, ok7 = a["arguments"].(types.Map)
	q.DeadArguments, ok8 = a["dead_arguments"].(types.Map)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 || !ok8 {
		return queueModel{}, false
	}
	return q, true
}

// encodeQueues is types.MapValueFrom(ctx, queueObjectType, queues).
func encodeQueues(ctx context.Context, queues map[string]queueModel) (types.Map, diag.Diagnostics) {
	elems := make(map[string]attr.Value, len(queues))
	for name, q := range queues {
		o, diags := types.ObjectValue(queueObjectType.AttrTypes, map[string]attr.Value{
			"max_priority":   q.MaxPriority,
			"message_ttl":    q.MessageTTL,
			"durable":        q.Durable,
			"queue_type":     q.QueueType,
			"name":           q.Name,
			"dead_name":      q.DeadName,
			"arguments":      q.Arguments,
			"dead_arguments": q.DeadArguments,
		})
		if diags.HasError() || !validArgs(q.Arguments) || !validArgs(q.DeadArguments) {
			return types.MapValueFrom(ctx, queueObjectType, queues)
		}
		elems[name] = o
	}
	m, diags := types.MapValue(queueObjectType, elems)
	if diags.HasError() {
		return types.MapValueFrom(ctx, queueObjectType, queues)
	}
	return m, nil
}

// validArgs reports whether an argument map has its element type, which a
// zero types.Map lacks.
func validArgs(m types.Map) bool {
	return m.ElementType(context.Background()) != nil
}
