package provider

import (
	"context"
	"errors"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// ValidateConfig runs the topology package's checks at plan time, the same
// the runtime runs at start-up, and points each error at its attribute.
func (r *queueSetResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var cfg queueSetModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(validateSet(ctx, cfg)...)
}

// validateSet checks what is known of a configuration. Unknown values (from
// resources not yet created) are checked at apply, when they are known.
func validateSet(ctx context.Context, cfg queueSetModel) diag.Diagnostics {
	var diags diag.Diagnostics
	prefixKnown := !cfg.Prefix.IsUnknown() && !cfg.Prefix.IsNull()
	if cfg.Queues.IsUnknown() || cfg.Queues.IsNull() {
		if prefixKnown {
			if err := topology.ValidatePrefix(cfg.Prefix.ValueString()); err != nil {
				diags.Append(topologyDiagnostic(err))
			}
		}
		return diags
	}
	queues := map[string]queueModel{}
	diags.Append(decodeQueues(ctx, cfg.Queues, &queues)...)
	if diags.HasError() {
		return diags
	}

	set, complete, d := knownQueues(cfg.Prefix.ValueString(), queues)
	diags.Append(d...)
	if !complete || cfg.Prefix.IsUnknown() {
		// Check what is known on its own; the full check runs once it all is.
		if !cfg.Prefix.IsUnknown() {
			if err := topology.ValidatePrefix(set.Prefix); err != nil {
				diags.Append(topologyDiagnostic(err))
			}
		}
		for _, q := range set.Queues {
			if err := topology.ValidateQueue(q); err != nil {
				diags.Append(topologyDiagnostic(err))
			}
		}
		return diags
	}
	if err := topology.Validate(set); err != nil {
		var joined interface{ Unwrap() []error }
		errs := []error{err}
		if errors.As(err, &joined) {
			errs = joined.Unwrap()
		}
		for _, e := range errs {
			diags.Append(topologyDiagnostic(e))
		}
	}
	return diags
}

// knownQueues resolves the queues whose configuration is known into a set
// under prefix, reporting the errors only the provider sees: a message_ttl
// that is no duration, and a max_priority out of range as written (which
// toTopology clamps into an int). complete says that every queue is known
// and resolved.
func knownQueues(prefix string, queues map[string]queueModel) (topology.Set, bool, diag.Diagnostics) {
	var diags diag.Diagnostics
	set := topology.Set{Prefix: prefix}
	complete := true
	for _, name := range sortedKeys(queues) {
		q := queues[name]
		if !configKnown(q) {
			complete = false
			continue
		}
		tq, ttlErr := toTopology(name, q)
		if ttlErr != nil {
			diags.Append(queueArgumentDiagnostic(name, "message_ttl", ttlErr.Error()))
		}
		if err := validMaxPriority(name, q); err != nil {
			diags.Append(topologyDiagnostic(err))
			tq.MaxPriority = 0 // reported; the other checks still run
		}
		if ttlErr != nil {
			complete = false
			continue
		}
		set.Queues = append(set.Queues, tq)
	}
	return set, complete, diags
}

// validMaxPriority checks q's max_priority as configured, an int64, which
// toTopology clamps into an int.
func validMaxPriority(name string, q queueModel) error {
	if q.MaxPriority.IsNull() || q.MaxPriority.IsUnknown() {
		return nil
	}
	return topology.ValidateMaxPriority(name, q.MaxPriority.ValueInt64())
}
