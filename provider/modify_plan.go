package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// ModifyPlan fills in every queue's names and arguments, which follow from
// the configuration alone, so the plan shows them instead of "known after
// apply"; and it warns about every queue the apply will replace because its
// arguments change, with its message count, and about every queue it will
// delete with messages (removed, or in a set replaced or destroyed;
// plan_warnings.go), since that is what an operator must see before
// approving; and about every durable = false queue on a broker that
// refuses or deprecates transient queues (transient.go).
func (r *queueSetResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		// A destroy: Delete checks for messages again, and refuses or
		// discards them.
		resp.Diagnostics.Append(r.destroyWarnings(ctx, req.State)...)
		return
	}
	var plan queueSetModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.Queues.IsUnknown() || plan.Queues.IsNull() || plan.Prefix.IsUnknown() {
		return
	}
	queues := map[string]queueModel{}
	resp.Diagnostics.Append(decodeQueues(ctx, plan.Queues, &queues)...)
	if resp.Diagnostics.HasError() {
		return
	}
	configured := map[string]queueModel{}
	if req.Config.Schema != nil && !req.Config.Raw.IsNull() {
		var cfg queueSetModel
		resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
		if !cfg.Queues.IsUnknown() {
			c, diags := queueModels(ctx, cfg.Queues)
			resp.Diagnostics.Append(diags...)
			configured = c
		}
		if resp.Diagnostics.HasError() {
			return
		}
	}
	for name, q := range queues {
		if c, ok := configured[name]; ok && c.MaxPriority.IsNull() && typeOf(q) == topology.QuorumQueueType {
			// The schema's default of 10 is a classic queue's: a quorum
			// queue takes no x-max-priority.
			q.MaxPriority = types.Int64Value(0)
		}
		queues[name] = withComputed(plan.Prefix.ValueString(), name, q)
	}
	m, diags := encodeQueues(ctx, queues)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("queues"), m)...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("runtime_config"), runtimeConfig(plan.Vhost, plan.Prefix, queues))...)
	if !plan.Vhost.IsUnknown() {
		resp.Diagnostics.Append(r.transientDiagnostics(plan.Vhost.ValueString(), plan.Prefix.ValueString(), queues)...)
		resp.Diagnostics.Append(r.quorumDiagnostics(plan.Prefix.ValueString(), queues)...)
	}

	if req.State.Raw.IsNull() {
		return
	}
	var state queueSetModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if !state.Prefix.Equal(plan.Prefix) || !state.Vhost.Equal(plan.Vhost) {
		// The whole set is replaced; Terraform's plan says so, and this
		// says what happens to its messages.
		resp.Diagnostics.Append(r.setReplacementWarnings(ctx, state, plan)...)
		return
	}
	before, diags := queueModels(ctx, state.Queues)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(r.removalWarnings(state.Vhost.ValueString(), plan.Prefix.ValueString(), forceDestroyOn(plan.ForceDestroy), before, queues)...)
	resp.Diagnostics.Append(r.replacementWarnings(ctx, state.Vhost.ValueString(), plan.Prefix.ValueString(), before, queues)...)
}

// replacementWarnings warns about each queue in both before (the state) and
// after (the plan) whose work or dead-letter queue the apply replaces.
func (r *queueSetResource) replacementWarnings(ctx context.Context, vhost, prefix string, before, after map[string]queueModel) diag.Diagnostics {
	var diags diag.Diagnostics
	for _, name := range sortedKeys(after) {
		old, ok := before[name]
		if !ok {
			continue
		}
		change, d := replacement(ctx, old, after[name])
		diags.Append(d...)
		if !change.Work && !change.Dead {
			continue
		}
		spec, err := specFor(prefix, name, after[name])
		if err != nil {
			continue // validateSet reports it
		}
		target := spec.work
		if !change.Work {
			target = spec.dead
		}
		count, counted := -1, "Its message count could not be read (the provider is not configured yet)."
		if r.data != nil {
			if bq, found, err := r.data.broker.getQueue(vhost, target.Name); err == nil && found {
				count, counted = int(bq.Messages), "The count is the management API's, which can lag a few seconds."
			}
		}
		diags.Append(replacementWarning(vhost, name, target, change.Reason, count, counted))
	}
	return diags
}
