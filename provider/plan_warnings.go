package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// This file holds the plan's warnings about the messages an apply would
// delete queues with: those of a queue removed from queues, of a whole set
// replaced because prefix or vhost changes, and of a set destroyed. With
// force_destroy the apply discards them; without it, it fails. Either way
// the operator should know before approving, with the counts, as the
// warning about a migrated queue (replacementWarnings) tells them.

// countsLag is what every count in these warnings is worth.
const countsLag = "The counts are the management API's, which can lag a few seconds."

// heldBy lists, for each logical queue of names under prefix in vhost that
// holds messages (in its work, migration, hold or dead-letter queues), where
// they are, as heldMessages words it. unread is not empty when the counts
// could not be read, and says why; held is empty then.
func (r *queueSetResource) heldBy(vhost, prefix string, names []string) (held map[string][]string, unread string) {
	held = map[string][]string{}
	if len(names) == 0 {
		return held, ""
	}
	if r.data == nil {
		return held, "the message counts could not be read, since the provider is not configured yet"
	}
	existing, err := r.data.broker.listQueues(vhost)
	if errors.Is(err, errVhostNotFound) {
		return held, ""
	}
	if err != nil {
		return held, fmt.Sprintf("the message counts could not be read (%s)", err)
	}
	for _, name := range names {
		if h := heldMessages(existing, topology.WorkName(prefix, name), true, true, true); len(h) > 0 {
			held[name] = h
		}
	}
	return held, ""
}

// queueModels decodes the queues map of a state: empty when it is null.
func queueModels(ctx context.Context, m types.Map) (map[string]queueModel, diag.Diagnostics) {
	out := map[string]queueModel{}
	if m.IsNull() {
		return out, nil
	}
	diags := decodeQueues(ctx, m, &out)
	return out, diags
}

// forceDestroyOn reports whether an apply would take force_destroy as set:
// a value not known until apply may be true, so it counts as set.
func forceDestroyOn(v types.Bool) bool { return v.IsUnknown() || v.ValueBool() }

// removalWarnings warns about each queue in before (the state) and not in
// after (the plan) that holds messages: the apply discards them when force
// (the plan's force_destroy) is set, and refuses the whole update otherwise.
func (r *queueSetResource) removalWarnings(vhost, prefix string, force bool, before, after map[string]queueModel) diag.Diagnostics {
	var removed []string
	for _, name := range sortedKeys(before) {
		if _, kept := after[name]; !kept {
			removed = append(removed, name)
		}
	}
	held, unread := r.heldBy(vhost, prefix, removed)
	var diags diag.Diagnostics
	for _, name := range removed {
		diags.Append(removalWarning(vhost, prefix, name, force, held[name], unread)...)
	}
	return diags
}

// removalWarning is the warning about removed queue name, which holds
// messages where held says; unread says why its counts are not known.
func removalWarning(vhost, prefix, name string, force bool, held []string, unread string) diag.Diagnostics {
	var diags diag.Diagnostics
	queues := fmt.Sprintf("queue %q (%q, its dead-letter queue and its hold queues)", name, topology.WorkName(prefix, name))
	switch {
	case unread != "" && force:
		diags.AddAttributeWarning(path.Root("queues"), "Removed Queue May Hold Messages",
			fmt.Sprintf("The apply deletes %s in virtual host %q, and force_destroy is set, so it discards whatever messages they hold; %s. "+
				"Check the queues before approving.", queues, vhost, unread))
	case len(held) == 0:
	case force:
		diags.AddAttributeWarning(path.Root("queues"), "Removed Queue's Messages Will Be Discarded",
			fmt.Sprintf("The apply deletes %s in virtual host %q, and force_destroy is set, so it discards their messages: %s. "+
				"Dead letters are lost with them. To keep the messages, drain the queues before applying, or set force_destroy = false. %s",
				queues, vhost, strings.Join(held, ", "), countsLag))
	default:
		diags.AddAttributeWarning(path.Root("queues"), "Removed Queue Holds Messages",
			fmt.Sprintf("The configuration removes %s in virtual host %q, but %s. Without force_destroy the apply refuses to delete them, "+
				"and fails before it changes any queue of the set. Drain them first, or set force_destroy = true to discard them. %s",
				queues, vhost, strings.Join(held, ", "), countsLag))
	}
	return diags
}

// setReplacementWarnings warns about the messages of a set that the plan
// replaces, because its prefix or vhost changes: Terraform destroys the
// state's set, then creates the plan's, and the destroy runs with the
// state's force_destroy, not the plan's.
func (r *queueSetResource) setReplacementWarnings(ctx context.Context, state, plan queueSetModel) diag.Diagnostics {
	before, diags := queueModels(ctx, state.Queues)
	if diags.HasError() {
		return diags
	}
	at, changed := path.Root("prefix"), "prefix"
	if !state.Vhost.Equal(plan.Vhost) {
		at, changed = path.Root("vhost"), "vhost"
		if !state.Prefix.Equal(plan.Prefix) {
			changed = "prefix and vhost"
		}
	}
	why := fmt.Sprintf("Changing %s replaces the whole queue set: Terraform destroys the queues of prefix %q in virtual host %q before it creates the new ones, "+
		"and no message moves to them.", changed, state.Prefix.ValueString(), state.Vhost.ValueString())
	diags.Append(r.discardWarning(at, why, state, sortedKeys(before))...)
	return diags
}

// destroyWarnings warns about the messages of a set the plan destroys.
func (r *queueSetResource) destroyWarnings(ctx context.Context, stateData tfsdk.State) diag.Diagnostics {
	var diags diag.Diagnostics
	if stateData.Raw.IsNull() {
		return diags
	}
	var state queueSetModel
	diags.Append(stateData.Get(ctx, &state)...)
	if diags.HasError() {
		return diags
	}
	before, more := queueModels(ctx, state.Queues)
	diags.Append(more...)
	if diags.HasError() {
		return diags
	}
	why := fmt.Sprintf("The plan destroys the queue set of prefix %q in virtual host %q.", state.Prefix.ValueString(), state.Vhost.ValueString())
	diags.Append(r.discardWarning(path.Empty(), why, state, sortedKeys(before))...)
	return diags
}

// discardWarning is the warning about a destroy of the set in state, which
// holds the queues names: why says what destroys it. The destroy takes
// force_destroy from the state.
func (r *queueSetResource) discardWarning(at path.Path, why string, state queueSetModel, names []string) diag.Diagnostics {
	var diags diag.Diagnostics
	vhost, prefix := state.Vhost.ValueString(), state.Prefix.ValueString()
	held, unread := r.heldBy(vhost, prefix, names)
	var where []string
	for _, name := range sortedKeys(held) {
		where = append(where, held[name]...)
	}
	force := state.ForceDestroy.ValueBool()
	add := func(summary, detail string) {
		if at.Equal(path.Empty()) {
			diags.AddWarning(summary, detail)
		} else {
			diags.AddAttributeWarning(at, summary, detail)
		}
	}
	switch {
	case unread != "" && force:
		add("Queue Set May Hold Messages",
			fmt.Sprintf("%s force_destroy is set in the state, so the destroy discards whatever messages the set's queues hold; %s. Check them before approving.", why, unread))
	case len(where) == 0:
	case force:
		add("Queue Set's Messages Will Be Discarded",
			fmt.Sprintf("%s force_destroy is set in the state, so the destroy discards the messages its queues hold: %s. Dead letters are lost with them. "+
				"To keep the messages, drain the queues before applying, or first apply force_destroy = false on its own. %s",
				why, strings.Join(where, ", "), countsLag))
	default:
		add("Queue Set Holds Messages",
			fmt.Sprintf("%s But %s, and force_destroy is not set in the state, so the destroy refuses, changing nothing, and the apply fails. "+
				"Drain them first, or first apply force_destroy = true on its own: the destroy takes force_destroy from the state, "+
				"not from a configuration that changes it in the same apply. %s",
				why, strings.Join(where, ", "), countsLag))
	}
	return diags
}
