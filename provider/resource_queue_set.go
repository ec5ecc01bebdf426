package provider

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/queuey/terraform-provider-queuey/provider/internal/migrate"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

var (
	_ resource.Resource                   = (*queueSetResource)(nil)
	_ resource.ResourceWithConfigure      = (*queueSetResource)(nil)
	_ resource.ResourceWithImportState    = (*queueSetResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*queueSetResource)(nil)
	_ resource.ResourceWithValidateConfig = (*queueSetResource)(nil)
)

// NewQueueSetResource returns the queuey_queue_set resource: a prefix and a
// map of logical queues, each a work queue and its dead-letter queue.
func NewQueueSetResource() resource.Resource {
	return &queueSetResource{}
}

type queueSetResource struct {
	data *providerData
}

type queueSetModel struct {
	ID           types.String `tfsdk:"id"`
	Vhost        types.String `tfsdk:"vhost"`
	Prefix       types.String `tfsdk:"prefix"`
	ForceDestroy types.Bool   `tfsdk:"force_destroy"`
	Queues       types.Map    `tfsdk:"queues"`
}

func (r *queueSetResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_queue_set"
}

func (r *queueSetResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = queueSetSchema()
}

// queueSetSchema is the resource's schema, grouped as required, optional,
// computed. Its descriptions are the generated documentation.
func queueSetSchema() schema.Schema {
	return schema.Schema{
		MarkdownDescription: "A queuey queue set: for every logical queue `name` under `prefix`, a work queue `<prefix>.<name>` and its dead-letter queue `<prefix>.<name>.dead`, " +
			"declared as classic queues through the RabbitMQ management API with the same names and arguments the queuey runtime uses.\n\n" +
			"Adding or removing a queue in `queues` changes just that queue. RabbitMQ cannot change a queue's arguments in place, so a change of " +
			"`max_priority`, `message_ttl` or `durable` replaces that one queue: the plan warns about it with the queue's current message count, " +
			"and the apply migrates it without losing a message: it moves the messages aside into `<prefix>.<name>.migrating` over AMQP (see the provider's `amqp_url`), " +
			"deletes the queue once it is empty, declares it with the new arguments and moves the messages back, properties and priorities intact. " +
			"An apply that stops halfway is finished by the next one. " +
			"Hold queues (`<prefix>.<name>.deferred.<ms>`), which the runtime declares on demand, are not managed here and are ignored when reading.",
		Attributes: map[string]schema.Attribute{
			// Required.
			"prefix": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "Prefix of every queue name of the set. It must not be empty, end in `.` or start with `amq.`. " +
					"Changing it replaces the whole set.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"queues": schema.MapNestedAttribute{
				Required: true,
				MarkdownDescription: "The logical queues of the set, keyed by logical name. " +
					fmt.Sprintf("Each work queue name (`<prefix>.<name>`) may have at most %d bytes, so that its longest hold-queue name fits RabbitMQ's %d-byte limit; ",
						topology.MaxWorkNameBytes, topology.MaxNameBytes) +
					"a logical name must not collide with another queue's dead-letter queue (`x` and `x.dead`).",
				NestedObject: schema.NestedAttributeObject{
					Attributes: map[string]schema.Attribute{
						"max_priority": schema.Int64Attribute{
							Optional: true,
							Computed: true,
							Default:  int64default.StaticInt64(topology.DefaultMaxPriority),
							MarkdownDescription: fmt.Sprintf("`x-max-priority` of the work queue: messages carry priorities 0 to this, and RabbitMQ delivers higher numbers first. "+
								"`0` makes it a queue without priorities. At most %d. (default: `%d`)", topology.MaxPriorityLimit, topology.DefaultMaxPriority),
						},
						"message_ttl": schema.StringAttribute{
							Optional:   true,
							CustomType: ttlType{},
							MarkdownDescription: "`x-message-ttl` of the work queue, as a duration such as `\"90s\"`, `\"15m\"` or `\"24h\"` (whole milliseconds, " +
								fmt.Sprintf("at most %d ms). Unset, messages do not expire. ", topology.MaxMessageTTL) +
								"The same duration written another way is no change: after `\"90s\"`, a configuration that says `\"1m30s\"` plans nothing, and the state keeps `\"90s\"`. " +
								"An import writes it as hours, minutes, seconds and milliseconds (`\"1m30s\"`), which a configuration saying `\"90s\"` leaves as it is.",
							PlanModifiers: []planmodifier.String{keepEquivalentTTL{}},
						},
						"durable": schema.BoolAttribute{
							Optional:            true,
							Computed:            true,
							Default:             booldefault.StaticBool(true),
							MarkdownDescription: "Whether the work queue survives a broker restart. The dead-letter queue is always durable. (default: `true`)",
						},
						"name": schema.StringAttribute{
							Computed:            true,
							MarkdownDescription: "Name of the work queue, `<prefix>.<name>`.",
						},
						"dead_name": schema.StringAttribute{
							Computed:            true,
							MarkdownDescription: "Name of the dead-letter queue, `<prefix>.<name>.dead`.",
						},
						"arguments": schema.MapAttribute{
							Computed:            true,
							ElementType:         types.Int64Type,
							MarkdownDescription: "Arguments of the work queue on the broker, such as `x-max-priority` and `x-message-ttl` (milliseconds), as numbers.",
						},
						"dead_arguments": schema.MapAttribute{
							Computed:            true,
							ElementType:         types.Int64Type,
							MarkdownDescription: "Arguments of the dead-letter queue on the broker; queuey declares it with none.",
						},
					},
				},
			},

			// Optional.
			"vhost": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString("/"),
				MarkdownDescription: "Virtual host the queues live in. Changing it replaces the whole set. (default: `/`)",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"force_destroy": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
				MarkdownDescription: "Let Terraform delete queues that still hold messages, discarding them: when a queue is removed from `queues`, " +
					"and when the set is destroyed. Without it those operations fail and say how many messages are where. Dead letters above all are worth reading first. " +
					"A queue replaced because its arguments change keeps its messages either way. (default: `false`)",
			},

			// Computed.
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`<prefix>@<vhost>`, e.g. `myapp@/`; the import id.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
		},
	}
}

func (r *queueSetResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	if !r.configured(&resp.Diagnostics) {
		return
	}
	var plan queueSetModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	queues := map[string]queueModel{}
	resp.Diagnostics.Append(plan.Queues.ElementsAs(ctx, &queues, false)...)
	if resp.Diagnostics.HasError() {
		return
	}
	vhost, prefix := plan.Vhost.ValueString(), plan.Prefix.ValueString()
	b := r.data.broker
	// Values unknown at plan time were not validated then.
	resp.Diagnostics.Append(validateSet(ctx, plan)...)
	if resp.Diagnostics.HasError() {
		return
	}

	existing, err := b.listQueues(vhost)
	if err != nil {
		r.listError(&resp.Diagnostics, "Create Queue Set Error", vhost, err)
		return
	}

	// Refuse before declaring anything when a queue exists with other
	// arguments: a set half declared is harder to sort out than one that
	// never started.
	specs := map[string]queueSpec{}
	for _, name := range sortedKeys(queues) {
		spec, err := specFor(prefix, name, queues[name])
		if err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("queues").AtMapKey(name), "Create Queue Set Error", err.Error())
			continue
		}
		specs[name] = spec
		for _, d := range spec.declarations() {
			if _, unfinished := existing[topology.MigrationName(d.name)]; unfinished {
				continue // declareOrResume finishes that migration
			}
			if q, ok := existing[d.name]; ok && !d.matches(q) {
				resp.Diagnostics.AddAttributeError(path.Root("queues").AtMapKey(name), "Queue Already Exists With Other Arguments",
					fmt.Sprintf("Queue %q already exists in virtual host %q with %s (durable %t), and the configuration asks for %s (durable %t). "+
						"RabbitMQ cannot change a queue's arguments in place. To take the existing queues over, import the set with "+
						"terraform import <address> %q and let the plan show the change; or change the configuration to match. Nothing was declared.",
						d.name, vhost, migrate.FormatArgs(q.Arguments), q.Durable, migrate.FormatArgs(d.args), d.durable, formatID(vhost, prefix)))
			}
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}

	var tasks []func() error
	var owners []string
	for _, name := range sortedKeys(specs) {
		for _, d := range specs[name].declarations() {
			tasks = append(tasks, func() error { return r.declareOrResume(ctx, vhost, d, existing) })
			owners = append(owners, name)
		}
	}
	for i, err := range runAll(ctx, declareWorkers, tasks) {
		if err != nil {
			r.declareError(&resp.Diagnostics, "Create Queue Set Error", vhost, prefix, owners[i], err)
		}
	}
	if resp.Diagnostics.HasError() {
		// No state: the queues that were declared are adopted by the next
		// apply, since declaring a queue that exists alike does nothing.
		return
	}

	for name, q := range queues {
		queues[name] = withComputed(prefix, name, q)
	}
	m, diags := types.MapValueFrom(ctx, queueObjectType, queues)
	resp.Diagnostics.Append(diags...)
	plan.Queues = m
	plan.ID = types.StringValue(formatID(vhost, prefix))
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *queueSetResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	if !r.configured(&resp.Diagnostics) {
		return
	}
	var state queueSetModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	vhost, prefix := state.Vhost.ValueString(), state.Prefix.ValueString()
	importing := state.Queues.IsNull()

	existing, err := r.data.broker.listQueues(vhost)
	if errors.Is(err, errVhostNotFound) && !importing {
		// Everything in it is gone; plan the set anew.
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		r.listError(&resp.Diagnostics, "Read Queue Set Error", vhost, err)
		return
	}

	prior := map[string]queueModel{}
	var names []string
	if importing {
		names = discover(prefix, existing)
		if len(names) == 0 {
			resp.Diagnostics.AddError("Queue Set Not Found",
				fmt.Sprintf("Virtual host %q has no queue set with prefix %q: no queue %q whose dead-letter queue %q exists too. "+
					"Check the import id, written <prefix>@<vhost>.", vhost, prefix, topology.WorkName(prefix, "<name>"), topology.DeadName(topology.WorkName(prefix, "<name>"))))
			return
		}
	} else {
		resp.Diagnostics.Append(state.Queues.ElementsAs(ctx, &prior, false)...)
		if resp.Diagnostics.HasError() {
			return
		}
		names = sortedKeys(prior)
	}

	var listed []string
	for n := range existing {
		listed = append(listed, n)
	}
	unfinished := setOf(migrate.Unfinished(listed))

	current := map[string]queueModel{}
	for _, name := range names {
		work := topology.WorkName(prefix, name)
		if !importing && (unfinished[work] || unfinished[topology.DeadName(work)]) {
			// Left out of the state, the queue is planned as added, and
			// the apply's declaration finishes the migration.
			where := strings.Join(heldMessages(existing, work, true, false, true), ", ")
			if where == "" {
				where = "its migration queue is still there" // its count had not reached the management API
			}
			resp.Diagnostics.AddAttributeWarning(path.Root("queues").AtMapKey(name), "Unfinished Queue Migration",
				fmt.Sprintf("A migration of queue %q to new arguments did not finish: %s. The plan declares the queue again, and the apply finishes the migration, moving every message back.",
					name, where))
			continue
		}
		var p *queueModel
		if old, ok := prior[name]; ok {
			p = &old
		}
		q, found, problems := readQueue(prefix, name, existing, p)
		if !found {
			continue
		}
		for _, problem := range problems {
			resp.Diagnostics.AddAttributeWarning(path.Root("queues").AtMapKey(name), "Queue Differs From What Queuey Declares",
				problem+". Terraform cannot show this difference in the plan; delete the queue (after draining it) so that the next apply declares it anew.")
		}
		current[name] = q
	}
	m, diags := types.MapValueFrom(ctx, queueObjectType, current)
	resp.Diagnostics.Append(diags...)
	state.Queues = m
	state.ID = types.StringValue(formatID(vhost, prefix))
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *queueSetResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	if !r.configured(&resp.Diagnostics) {
		return
	}
	var plan, state queueSetModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	after, before := map[string]queueModel{}, map[string]queueModel{}
	resp.Diagnostics.Append(plan.Queues.ElementsAs(ctx, &after, false)...)
	if !state.Queues.IsNull() {
		resp.Diagnostics.Append(state.Queues.ElementsAs(ctx, &before, false)...)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	vhost, prefix := plan.Vhost.ValueString(), plan.Prefix.ValueString()
	force := plan.ForceDestroy.ValueBool()
	b := r.data.broker
	// Values unknown at plan time were not validated then.
	resp.Diagnostics.Append(validateSet(ctx, plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for name, q := range after {
		after[name] = withComputed(prefix, name, q)
	}

	var removed, added []string
	changes := map[string]queueChange{}
	// restore lists the queues with a broker queue deleted outside
	// Terraform, to declare again.
	restore := map[string]bool{}
	for _, name := range sortedKeys(before) {
		if _, ok := after[name]; !ok {
			removed = append(removed, name)
		}
	}
	for _, name := range sortedKeys(after) {
		old, ok := before[name]
		if !ok {
			added = append(added, name)
			continue
		}
		c, diags := replacement(ctx, old, after[name])
		resp.Diagnostics.Append(diags...)
		if c.Work || c.Dead {
			changes[name] = c
		}
		if mw, md := missing(old); mw || md {
			restore[name] = true
		}
	}
	specs := map[string]queueSpec{}
	for _, name := range append(append(append([]string{}, added...), sortedKeys(changes)...), sortedKeys(restore)...) {
		spec, err := specFor(prefix, name, after[name])
		if err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("queues").AtMapKey(name), "Update Queue Set Error", err.Error())
			continue
		}
		specs[name] = spec
	}
	if resp.Diagnostics.HasError() {
		return
	}

	// One listing serves the checks below and tells which queues have a
	// migration left unfinished by an apply that died.
	existing, err := b.listQueues(vhost)
	if err != nil {
		r.listError(&resp.Diagnostics, "Update Queue Set Error", vhost, err)
		return
	}
	// Check every queue that would be deleted before deleting any: an
	// apply that refuses should change nothing. A queue whose arguments
	// change is migrated with its messages, so it needs no such check.
	if !force {
		for _, name := range removed {
			if held := heldMessages(existing, topology.WorkName(prefix, name), true, true, true); len(held) > 0 {
				resp.Diagnostics.AddAttributeError(path.Root("queues").AtMapKey(name), "Queue Holds Messages",
					fmt.Sprintf("Queue %q was removed from the configuration, but in virtual host %q %s. Deleting it would discard them, so nothing was changed. "+
						"Drain them first, or set force_destroy = true to discard them.", name, vhost, strings.Join(held, ", ")))
			}
		}
		if resp.Diagnostics.HasError() {
			return
		}
	}

	// result starts as the prior state and takes each change as it
	// succeeds, so that a partly failed apply records what it did.
	result := map[string]queueModel{}
	for name, q := range before {
		result[name] = q
	}
	type op struct {
		name string
		run  func() error
		done func()
	}
	var ops []op
	for _, name := range removed {
		ops = append(ops, op{name, func() error { return r.removeQueue(vhost, prefix, name, existing, force) }, func() { delete(result, name) }})
	}
	for _, name := range sortedKeys(changes) {
		c, spec := changes[name], specs[name]
		mw, md := missing(before[name])
		ops = append(ops, op{name, func() error {
			for _, d := range spec.declarations() {
				var err error
				switch {
				case (d.dead && c.Dead) || (!d.dead && c.Work):
					err = r.replaceQueue(ctx, vhost, d)
				case (d.dead && md) || (!d.dead && mw):
					err = r.declareOrResume(ctx, vhost, d, existing)
				}
				if err != nil {
					return err
				}
			}
			return nil
		}, func() { result[name] = after[name] }})
	}
	for _, name := range added {
		spec := specs[name]
		ops = append(ops, op{name, func() error {
			for _, d := range spec.declarations() {
				if err := r.declareOrResume(ctx, vhost, d, existing); err != nil {
					return err
				}
			}
			return nil
		}, func() { result[name] = after[name] }})
	}
	for _, name := range sortedKeys(restore) {
		if _, replaced := changes[name]; replaced {
			// Kept apart from replacements so that one op owns a queue.
			continue
		}
		spec := specs[name]
		mw, md := missing(before[name])
		ops = append(ops, op{name, func() error {
			for _, d := range spec.declarations() {
				if (d.dead && md) || (!d.dead && mw) {
					if err := r.declareOrResume(ctx, vhost, d, existing); err != nil {
						return err
					}
				}
			}
			return nil
		}, func() { result[name] = after[name] }})
	}
	tasks := make([]func() error, len(ops))
	for i, o := range ops {
		tasks[i] = o.run
	}
	for i, err := range runAll(ctx, declareWorkers, tasks) {
		if err != nil {
			r.declareError(&resp.Diagnostics, "Update Queue Set Error", vhost, prefix, ops[i].name, err)
			continue
		}
		ops[i].done()
	}
	// Queues that did not change take the plan's values: Terraform wants
	// the state an apply returns to match its plan, and a plan may write a
	// queue another way without changing it (message_ttl "0s" for none).
	for name, q := range after {
		if _, ok := before[name]; ok {
			_, changed := changes[name]
			if !changed && !restore[name] {
				result[name] = q
			}
		}
	}

	m, diags := types.MapValueFrom(ctx, queueObjectType, result)
	resp.Diagnostics.Append(diags...)
	plan.Queues = m
	plan.ID = types.StringValue(formatID(vhost, prefix))
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *queueSetResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	if !r.configured(&resp.Diagnostics) {
		return
	}
	var state queueSetModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	queues := map[string]queueModel{}
	if !state.Queues.IsNull() {
		resp.Diagnostics.Append(state.Queues.ElementsAs(ctx, &queues, false)...)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	vhost, prefix := state.Vhost.ValueString(), state.Prefix.ValueString()
	force := state.ForceDestroy.ValueBool()

	existing, err := r.data.broker.listQueues(vhost)
	if errors.Is(err, errVhostNotFound) {
		return
	}
	if err != nil {
		r.listError(&resp.Diagnostics, "Delete Queue Set Error", vhost, err)
		return
	}
	if !force {
		var held []string
		for _, name := range sortedKeys(queues) {
			held = append(held, heldMessages(existing, topology.WorkName(prefix, name), true, true, true)...)
		}
		if len(held) > 0 {
			resp.Diagnostics.AddError("Queue Set Holds Messages",
				fmt.Sprintf("The queue set %q in virtual host %q was not destroyed, because %s. Destroying the set would discard those messages. "+
					"Drain them first, or set force_destroy = true and apply before destroying.", prefix, vhost, strings.Join(held, ", ")))
			return
		}
	}
	names := sortedKeys(queues)
	tasks := make([]func() error, len(names))
	for i, name := range names {
		tasks[i] = func() error { return r.removeQueue(vhost, prefix, name, existing, force) }
	}
	for i, err := range runAll(ctx, declareWorkers, tasks) {
		if err != nil {
			r.declareError(&resp.Diagnostics, "Delete Queue Set Error", vhost, prefix, names[i], err)
		}
	}
}

func (r *queueSetResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	vhost, prefix, err := parseID(req.ID)
	if err != nil {
		resp.Diagnostics.AddError("Invalid Import ID",
			fmt.Sprintf("The import id %q could not be read. Write it as <prefix>@<vhost>, such as myapp@/ for prefix myapp in the default virtual host; "+
				"percent-encode a '@' or '%%' inside either part.\n\n%s", req.ID, err))
		return
	}
	// Queues stay null: Read takes that as the sign to discover them.
	state := queueSetModel{
		ID:           types.StringValue(formatID(vhost, prefix)),
		Vhost:        types.StringValue(vhost),
		Prefix:       types.StringValue(prefix),
		ForceDestroy: types.BoolValue(false),
		Queues:       types.MapNull(queueObjectType),
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Configure takes the broker the provider configured.
func (r *queueSetResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if req.ProviderData == nil {
		return
	}
	data, ok := req.ProviderData.(*providerData)
	if !ok {
		resp.Diagnostics.AddError("Unexpected Provider Data",
			fmt.Sprintf("The queue set resource was given provider data of type %T. This is a bug in the provider; please report it.", req.ProviderData))
		return
	}
	r.data = data
}

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
	if cfg.Queues.IsUnknown() || cfg.Queues.IsNull() {
		if !cfg.Prefix.IsUnknown() && !cfg.Prefix.IsNull() {
			if err := topology.ValidatePrefix(cfg.Prefix.ValueString()); err != nil {
				diags.AddAttributeError(path.Root("prefix"), "Invalid Queue Set Prefix", err.Error())
			}
		}
		return diags
	}
	queues := map[string]queueModel{}
	diags.Append(cfg.Queues.ElementsAs(ctx, &queues, false)...)
	if diags.HasError() {
		return diags
	}

	set := topology.Set{Prefix: cfg.Prefix.ValueString()}
	complete := !cfg.Prefix.IsUnknown()
	for _, name := range sortedKeys(queues) {
		q := queues[name]
		if q.MessageTTL.IsUnknown() || q.MaxPriority.IsUnknown() || q.Durable.IsUnknown() {
			complete = false
			continue
		}
		tq, err := toTopology(name, q)
		if err != nil {
			diags.AddAttributeError(path.Root("queues").AtMapKey(name).AtName("message_ttl"), "Invalid Message TTL", err.Error())
			complete = false
			continue
		}
		if q.MaxPriority.ValueInt64() < 0 || q.MaxPriority.ValueInt64() > topology.MaxPriorityLimit {
			// toTopology clamped it; report the value as written.
			err := topology.ValidateQueue(topology.Queue{Name: name, MaxPriority: tq.MaxPriority})
			diags.AddAttributeError(path.Root("queues").AtMapKey(name).AtName("max_priority"), "Invalid Max Priority",
				strings.Replace(err.Error(), fmt.Sprint(tq.MaxPriority), fmt.Sprint(q.MaxPriority.ValueInt64()), 1))
			tq.MaxPriority = 0
		}
		set.Queues = append(set.Queues, tq)
	}
	if !complete {
		// Check what is known on its own; the full check runs once it all is.
		if !cfg.Prefix.IsUnknown() {
			if err := topology.ValidatePrefix(set.Prefix); err != nil {
				diags.AddAttributeError(path.Root("prefix"), "Invalid Queue Set Prefix", err.Error())
			}
		}
		for _, q := range set.Queues {
			if err := topology.ValidateQueue(q); err != nil {
				diags.Append(topologyDiagnostic(set.Prefix, err))
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
			diags.Append(topologyDiagnostic(set.Prefix, e))
		}
	}
	return diags
}

// topologyDiagnostic points one error of the topology checks at the
// attribute it is about.
func topologyDiagnostic(prefix string, err error) diag.Diagnostic {
	var nameErr *topology.NameError
	var argErr *topology.ArgumentError
	switch {
	case errors.As(err, &argErr):
		attr, summary := "max_priority", "Invalid Max Priority"
		if strings.Contains(argErr.Argument, "TTL") {
			attr, summary = "message_ttl", "Invalid Message TTL"
		}
		return diag.NewAttributeErrorDiagnostic(path.Root("queues").AtMapKey(argErr.Queue).AtName(attr), summary, err.Error())
	case errors.As(err, &nameErr) && strings.HasPrefix(err.Error(), "prefix:"):
		// Errors of the set as a whole read "prefix: ..." too; only the
		// prefix's own check makes one about the prefix.
		if perr := topology.ValidatePrefix(prefix); perr != nil && perr.Error() == err.Error() {
			return diag.NewAttributeErrorDiagnostic(path.Root("prefix"), "Invalid Queue Set Prefix", err.Error())
		}
		if strings.Contains(err.Error(), "no queues") {
			return diag.NewAttributeErrorDiagnostic(path.Root("queues"), "Queue Set Has No Queues", err.Error())
		}
		return diag.NewAttributeErrorDiagnostic(path.Root("queues"), "Invalid Queue Set", err.Error())
	case errors.As(err, &nameErr):
		return diag.NewAttributeErrorDiagnostic(path.Root("queues").AtMapKey(nameErr.Queue), "Invalid Queue Name", err.Error())
	}
	return diag.NewAttributeErrorDiagnostic(path.Root("queues"), "Invalid Queue Set", err.Error())
}

// ModifyPlan fills in every queue's names and arguments, which follow from
// the configuration alone, so the plan shows them instead of "known after
// apply"; and it warns about every queue the apply will replace because its
// arguments change, with its message count, since that is what an operator
// must see before approving.
func (r *queueSetResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy: Delete checks for messages and says so
	}
	var plan queueSetModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.Queues.IsUnknown() || plan.Queues.IsNull() || plan.Prefix.IsUnknown() {
		return
	}
	queues := map[string]queueModel{}
	resp.Diagnostics.Append(plan.Queues.ElementsAs(ctx, &queues, false)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for name, q := range queues {
		queues[name] = withComputed(plan.Prefix.ValueString(), name, q)
	}
	m, diags := types.MapValueFrom(ctx, queueObjectType, queues)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("queues"), m)...)

	if req.State.Raw.IsNull() {
		return
	}
	var state queueSetModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if !state.Prefix.Equal(plan.Prefix) || !state.Vhost.Equal(plan.Vhost) {
		return // the whole set is replaced; Terraform's plan says so
	}
	before := map[string]queueModel{}
	if !state.Queues.IsNull() {
		resp.Diagnostics.Append(state.Queues.ElementsAs(ctx, &before, false)...)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	for _, name := range sortedKeys(queues) {
		old, ok := before[name]
		if !ok {
			continue
		}
		change, diags := replacement(ctx, old, queues[name])
		resp.Diagnostics.Append(diags...)
		if !change.Work && !change.Dead {
			continue
		}
		spec, err := specFor(plan.Prefix.ValueString(), name, queues[name])
		if err != nil {
			continue // validateSet reports it
		}
		target := spec.work
		if !change.Work {
			target = spec.dead
		}
		count, counted := -1, "Its message count could not be read (the provider is not configured yet)."
		if r.data != nil {
			if bq, found, err := r.data.broker.getQueue(state.Vhost.ValueString(), target.name); err == nil && found {
				count, counted = int(bq.Messages), "The count is the management API's, which can lag a few seconds."
			}
		}
		resp.Diagnostics.AddAttributeWarning(path.Root("queues").AtMapKey(name), "Queue Will Be Replaced",
			fmt.Sprintf("In virtual host %q, %s. It is replaced because RabbitMQ cannot change a queue's arguments in place (%s). %s "+
				"While the queue is replaced, queuey producers publish into the migration queue (their jobs are moved back with the rest), "+
				"and workers resubscribe when the queue is back. An apply that stops halfway is resumed by the next one. "+
				"Two risks remain: a delay, retry or deferral that a hold queue releases in the milliseconds the queue is absent is lost, "+
				"and so is a publish that reaches the queue while RabbitMQ deletes it from a client that does not look for the migration's divert marker "+
				"(a raw AMQP client, a queuey producer from NewUndeclaredProducer or one whose queue set does not list this queue): "+
				"pause such clients for the apply (see the guide on priority migrations).",
				state.Vhost.ValueString(), migrate.Describe(target.name, count, target.args, target.durable), change.Reason, counted))
	}
}

// replaceQueue declares one broker queue again with new arguments without
// losing a message: it moves them aside into the queue's migration queue over
// AMQP, deletes the queue only when it is empty, declares it anew and moves
// them back (see package migrate). Called for a queue whose migration queue
// was left behind by an apply that died, it finishes that migration.
func (r *queueSetResource) replaceQueue(ctx context.Context, vhost string, d declaration) error {
	res, err := migrate.MigrateURL(ctx, r.data.amqpURL, vhost, r.data.amqpConfig, d.name, d.args, d.durable, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", errMigration, err)
	}
	tflog.Info(ctx, "queue migrated", map[string]any{
		"queue": d.name, "found": string(res.Found), "moved_aside": res.MovedAside, "moved_back": res.MovedBack,
		"absent_ms": res.Absent.Milliseconds(), "took_ms": res.Took.Milliseconds(), "user_ids_dropped": res.UserIDsDropped,
	})
	if res.UserIDsDropped > 0 {
		tflog.Warn(ctx, "queue migrated with messages whose user_id named another user than the provider's AMQP user; RabbitMQ refuses to publish those, so they were moved without it", map[string]any{
			"queue": d.name, "messages": res.UserIDsDropped,
		})
	}
	return nil
}

// errMigration marks a failed migration, whose messages are safe in one of
// two queues and which the next apply resumes.
var errMigration = errors.New("migration failed")

// declareOrResume declares d, or, when a migration of d's queue was left
// unfinished (its migration queue exists), finishes that migration.
func (r *queueSetResource) declareOrResume(ctx context.Context, vhost string, d declaration, existing map[string]brokerQueue) error {
	if _, unfinished := existing[topology.MigrationName(d.name)]; unfinished {
		return r.replaceQueue(ctx, vhost, d)
	}
	return r.data.broker.declare(vhost, d.name, d.durable, d.args)
}

// removeQueue deletes a logical queue: the divert queue an unfinished
// migration left, its hold queues, its work queue, the migration queue an
// unfinished migration left, and its dead-letter queue, in that order, so
// that nothing dead-letters into a queue already gone. Which hold, divert and
// migration queues exist comes from existing, the listing the caller made. Without force the broker refuses each deletion of a queue that holds
// ready messages, whatever a lagging count said.
func (r *queueSetResource) removeQueue(vhost, prefix, name string, existing map[string]brokerQueue, force bool) error {
	b := r.data.broker
	work := topology.WorkName(prefix, name)
	names := holdQueuesOf(existing, work)
	// The divert queue goes first: it sends producers into the migration
	// queue, which is about to go too.
	if _, ok := existing[topology.DivertName(work)]; ok {
		names = append([]string{topology.DivertName(work)}, names...)
	}
	names = append(names, work)
	if _, ok := existing[topology.MigrationName(work)]; ok {
		names = append(names, topology.MigrationName(work))
	}
	for _, n := range append(names, topology.DeadName(work)) {
		if err := b.deleteQueue(vhost, n, !force); err != nil {
			return err
		}
	}
	return nil
}

// holdQueuesOf lists, in name order, the hold queues of work in existing.
func holdQueuesOf(existing map[string]brokerQueue, work string) []string {
	var found []string
	for n := range existing {
		if held, _, ok := topology.ParseHoldName(n); ok && held == work {
			found = append(found, n)
		}
	}
	sort.Strings(found)
	return found
}

// configured reports whether the provider handed over a broker, and says
// what to do when it did not.
func (r *queueSetResource) configured(diags *diag.Diagnostics) bool {
	if r.data != nil {
		return true
	}
	diags.AddError("Provider Not Configured",
		"The queuey provider has no broker to talk to yet, because its settings depend on values not known until apply. "+
			"Set endpoint, username and password to known values, or apply the resources they depend on first.")
	return false
}

func (r *queueSetResource) listError(diags *diag.Diagnostics, summary, vhost string, err error) {
	if errors.Is(err, errVhostNotFound) {
		diags.AddAttributeError(path.Root("vhost"), "Virtual Host Not Found",
			fmt.Sprintf("RabbitMQ at %s has no virtual host %q. Create it first (rabbitmqctl add_vhost), or set vhost to one that exists.", r.data.broker.endpoint, vhost))
		return
	}
	s, d := r.data.broker.brokerDiagnostic(summary, fmt.Sprintf("list the queues of virtual host %q", vhost), err)
	diags.AddError(s, d)
}

func (r *queueSetResource) declareError(diags *diag.Diagnostics, summary, vhost, prefix, name string, err error) {
	at := path.Root("queues").AtMapKey(name)
	switch {
	case errors.Is(err, errMigration):
		diags.AddAttributeError(at, "Queue Migration Error",
			fmt.Sprintf("Migrating a queue of %q in virtual host %q to its new arguments stopped. No message was discarded: they are in the queue or in its migration queue (ending in %q), "+
				"and the next apply resumes the migration. Check that the broker answers over AMQP at the provider's amqp_url (or QUEUEY_AMQP_URL), then apply again.\n\n%s",
				name, vhost, topology.MigrationSuffix, err))
	case errors.Is(err, errInequivalent):
		diags.AddAttributeError(at, "Queue Already Exists With Other Arguments",
			fmt.Sprintf("A queue of %q already exists in virtual host %q with other arguments or durability than the configuration asks for. "+
				"To take it over, import the set with terraform import <address> %q and let the plan show the change; or change the configuration to match.\n\n%s",
				name, vhost, formatID(vhost, prefix), err))
	case errors.Is(err, errNotEmpty):
		diags.AddAttributeError(at, "Queue Holds Messages",
			fmt.Sprintf("RabbitMQ refused to delete a queue of %q in virtual host %q because it holds messages (its count had not reached the management API yet). "+
				"Drain it first, or set force_destroy = true to discard them.\n\n%s", name, vhost, err))
	default:
		s, d := r.data.broker.brokerDiagnostic(summary, fmt.Sprintf("change the queues of %q in virtual host %q", name, vhost), err)
		diags.AddAttributeError(at, s, d)
	}
}

// declaration is one broker queue as the configuration wants it.
type declaration struct {
	name    string
	durable bool
	args    map[string]any
	dead    bool
}

// matches reports whether an existing queue is what d would declare.
func (d declaration) matches(q brokerQueue) bool {
	return q.Durable == d.durable && reflect.DeepEqual(normalizeArgs(q.Arguments), normalizeArgs(d.args))
}

// queueSpec is a logical queue's two broker queues.
type queueSpec struct {
	work, dead declaration
}

func (s queueSpec) declarations() []declaration { return []declaration{s.work, s.dead} }

// specFor computes a logical queue's declarations with the topology
// package, the only place queue names and arguments are spelled.
func specFor(prefix, name string, q queueModel) (queueSpec, error) {
	tq, err := toTopology(name, q)
	if err != nil {
		return queueSpec{}, err
	}
	if err := topology.ValidateQueue(tq); err != nil {
		return queueSpec{}, err
	}
	work := topology.WorkName(prefix, name)
	return queueSpec{
		work: declaration{name: work, durable: tq.Durable, args: topology.WorkArgs(tq)},
		dead: declaration{name: topology.DeadName(work), durable: topology.DeadDurable, args: topology.DeadArgs(), dead: true},
	}, nil
}

// heldMessages lists where messages of work's queues are, as "queue
// \"p.x.dead\" holds 3 messages", looking at the work queue, its hold
// queues and its dead-letter queue as asked.
func heldMessages(existing map[string]brokerQueue, workName string, work, holds, dead bool) []string {
	var names []string
	if work {
		names = append(names, workName, topology.MigrationName(workName))
	}
	if holds {
		names = append(names, holdQueuesOf(existing, workName)...)
	}
	if dead {
		names = append(names, topology.DeadName(workName))
	}
	var out []string
	for _, n := range names {
		if q, ok := existing[n]; ok && q.Messages > 0 {
			out = append(out, fmt.Sprintf("queue %q holds %s", n, migrate.Count(int(q.Messages))))
		}
	}
	return out
}

func setOf(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}
