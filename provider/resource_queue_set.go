package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

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
	// RuntimeConfig is the set in the JSON the runtime reads.
	RuntimeConfig types.String `tfsdk:"runtime_config"`
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
			"Adding or removing a queue in `queues` changes just that queue; a plan that deletes queues holding messages warns, with the counts. " +
			"RabbitMQ cannot change a queue's arguments in place, so a change of " +
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
							MarkdownDescription: "`x-message-ttl` of the work queue: RabbitMQ deletes a job that has waited this long in it. " +
								"**Nothing records an expired job**: the work queue has no dead-letter exchange, so the job does not reach `<prefix>.<name>.dead`, " +
								"no handler runs it, nothing logs it, and its producer was told it was enqueued. The wait starts each time the job enters the work queue " +
								"(when it is enqueued, and again when a delay, retry or deferral brings it back); a job a worker is handling does not expire. " +
								"Set it only for jobs that are worthless once late. Unset, jobs wait until they are handled. " +
								"Written as a duration: numbers with units `ms`, `s`, `m`, `h` or `d`, together or apart, such as `\"90s\"`, `\"15m\"`, `\"24h\"`, `\"7d\"`, `\"1h30m\"` or `\"1d 12h\"` " +
								fmt.Sprintf("(whole milliseconds, at most %d ms, which is `\"%s\"`). ", topology.MaxMessageTTL, topology.FormatDuration(time.Duration(topology.MaxMessageTTL)*time.Millisecond)) +
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
						"queue_type": schema.StringAttribute{
							Optional: true,
							Computed: true,
							Default:  stringdefault.StaticString(topology.DefaultQueueType),
							MarkdownDescription: "Type of the work and dead-letter queues: `classic`, which lives on one node of a cluster, or `quorum`, replicated on a majority of the nodes so that it survives the loss of a minority. " +
								"Hold queues are classic either way (a quorum queue's `x-expires` is not renewed by a redeclare). " +
								"A quorum queue must be durable and takes no `max_priority`, which defaults to `0` for it: RabbitMQ refuses `x-max-priority` on quorum queues; " +
								"4.0 and later give them two priority levels without it (0 to 4 normal, 5 and above high, served two high for one normal), which queuey uses to put deferred jobs ahead of the backlog, and 3.x delivers in order. " +
								fmt.Sprintf("Its queues get `x-delivery-limit` (%d on the work queue, whose workers dead-letter a job redelivered %d times without running it; %d, no limit in effect, on the dead-letter queue, whose every read counts as a delivery). ",
									topology.WorkDeliveryLimit, topology.WorkDeliveryLimit-1, topology.UnlimitedDeliveries) +
								"Changing it replaces the work and dead-letter queues, with their messages moved across like any argument change. (default: `classic`)",
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
					"and when the set is destroyed, or replaced because `prefix` or `vhost` changes. Without it those operations fail and say how many messages are where. " +
					"Either way the plan warns first, with the counts. Dead letters above all are worth reading first. " +
					"A destroy (the destroy half of a replacement too) takes the value in state, so set it in an apply of its own before; a removal takes the configuration's. " +
					"A queue replaced because its arguments change keeps its messages either way. (default: `false`)",
			},

			// Computed.
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`<prefix>@<vhost>`, e.g. `myapp@/`; the import id.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"runtime_config": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "The set as JSON, in the form the queuey Go runtime reads (`queuey.ParseQueueSet`, or `queuey.LoadQueueSet` from an environment variable or file): " +
					"the vhost, the prefix, and every queue with its broker names and the arguments Terraform declared it with. " +
					"A process built from it declares exactly these queues, so the set is written once, here. " +
					"Per-process settings (prefetch, retry policies) are set in Go. " +
					fmt.Sprintf("Format version %d: ", topology.RuntimeConfigVersion) +
					"`{\"version\":1,\"vhost\":\"/\",\"prefix\":\"myapp\",\"queues\":[{\"name\":\"emails\",\"work_queue\":\"myapp.emails\",\"dead_queue\":\"myapp.emails.dead\",\"max_priority\":10,\"message_ttl_ms\":0,\"durable\":true}]}`.",
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
	resp.Diagnostics.Append(decodeQueues(ctx, plan.Queues, &queues)...)
	if resp.Diagnostics.HasError() {
		return
	}
	vhost, prefix := plan.Vhost.ValueString(), plan.Prefix.ValueString()
	// Values unknown at plan time were not validated then.
	resp.Diagnostics.Append(validateSet(ctx, plan)...)
	if resp.Diagnostics.HasError() {
		return
	}

	existing, err := r.data.broker.listQueues(vhost)
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
			if q, refused := conflict(d, existing); refused {
				resp.Diagnostics.Append(conflictError(vhost, prefix, name, d, q))
			}
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}

	ops := createOperations(specs, existing)
	r.declareErrors(&resp.Diagnostics, "Create Queue Set Error", vhost, prefix, ops, r.run(ctx, vhost, ops))
	if resp.Diagnostics.HasError() {
		// No state: the queues that were declared are adopted by the next
		// apply, since declaring a queue that exists alike does nothing.
		return
	}
	for name, q := range queues {
		queues[name] = withComputed(prefix, name, q)
	}
	writeState(ctx, &resp.State, plan, queues, &resp.Diagnostics)
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
		if names = discover(prefix, existing); len(names) == 0 {
			resp.Diagnostics.Append(setNotFound(vhost, prefix))
			return
		}
	} else {
		resp.Diagnostics.Append(decodeQueues(ctx, state.Queues, &prior)...)
		if resp.Diagnostics.HasError() {
			return
		}
		names = sortedKeys(prior)
	}

	unfinished := setOf(migrate.Unfinished(sortedKeys(existing)))
	current := map[string]queueModel{}
	for _, name := range names {
		work := topology.WorkName(prefix, name)
		if !importing && (unfinished[work] || unfinished[topology.DeadName(work)]) {
			// Left out of the state, the queue is planned as added, and
			// the apply's declaration finishes the migration.
			resp.Diagnostics.Append(unfinishedMigration(name, strings.Join(heldMessages(existing, work, true, false, true), ", ")))
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
			resp.Diagnostics.Append(differsFromQueuey(name, problem))
		}
		current[name] = q
	}
	writeState(ctx, &resp.State, state, current, &resp.Diagnostics)
}

func (r *queueSetResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	if !r.configured(&resp.Diagnostics) {
		return
	}
	var plan, state queueSetModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	after, before := map[string]queueModel{}, map[string]queueModel{}
	resp.Diagnostics.Append(decodeQueues(ctx, plan.Queues, &after)...)
	if !state.Queues.IsNull() {
		resp.Diagnostics.Append(decodeQueues(ctx, state.Queues, &before)...)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	vhost, prefix := plan.Vhost.ValueString(), plan.Prefix.ValueString()
	// Values unknown at plan time were not validated then.
	resp.Diagnostics.Append(validateSet(ctx, plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for name, q := range after {
		after[name] = withComputed(prefix, name, q)
	}
	changes, diags := planChanges(ctx, prefix, before, after)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}

	// One listing serves the check below and tells which queues have a
	// migration left unfinished by an apply that died.
	existing, err := r.data.broker.listQueues(vhost)
	if err != nil {
		r.listError(&resp.Diagnostics, "Update Queue Set Error", vhost, err)
		return
	}
	// Check every queue that would be deleted before deleting any: an
	// apply that refuses should change nothing.
	force := plan.ForceDestroy.ValueBool()
	if !force {
		held := changes.removalsHoldingMessages(prefix, existing)
		for _, name := range sortedKeys(held) {
			resp.Diagnostics.Append(removalHoldsMessages(vhost, name, held[name]))
		}
		if resp.Diagnostics.HasError() {
			return
		}
	}

	ops := changes.operations(prefix, existing, force)
	errs := r.run(ctx, vhost, ops)
	r.declareErrors(&resp.Diagnostics, "Update Queue Set Error", vhost, prefix, ops, errs)
	writeState(ctx, &resp.State, plan, changes.stateAfter(before, after, ops, errs), &resp.Diagnostics)
}

func (r *queueSetResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	if !r.configured(&resp.Diagnostics) {
		return
	}
	var state queueSetModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	queues := map[string]queueModel{}
	if !state.Queues.IsNull() {
		resp.Diagnostics.Append(decodeQueues(ctx, state.Queues, &queues)...)
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
	names := sortedKeys(queues)
	if !force {
		var held []string
		for _, name := range names {
			held = append(held, heldMessages(existing, topology.WorkName(prefix, name), true, true, true)...)
		}
		if len(held) > 0 {
			resp.Diagnostics.Append(setHoldsMessages(vhost, prefix, held))
			return
		}
	}
	ops := deleteOperations(prefix, names, existing, force)
	r.declareErrors(&resp.Diagnostics, "Delete Queue Set Error", vhost, prefix, ops, r.run(ctx, vhost, ops))
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

// writeState records m with queues as its queues map and its id, the one
// way Create, Read and Update write state.
func writeState(ctx context.Context, state *tfsdk.State, m queueSetModel, queues map[string]queueModel, diags *diag.Diagnostics) {
	v, d := encodeQueues(ctx, queues)
	diags.Append(d...)
	m.Queues = v
	m.ID = types.StringValue(formatID(m.Vhost.ValueString(), m.Prefix.ValueString()))
	m.RuntimeConfig = runtimeConfig(m.Vhost, m.Prefix, queues)
	diags.Append(state.Set(ctx, &m)...)
}

// runtimeConfig is the runtime_config of a set: its JSON, or unknown while
// any part of it is.
func runtimeConfig(vhost, prefix types.String, queues map[string]queueModel) types.String {
	if vhost.IsUnknown() || prefix.IsUnknown() {
		return types.StringUnknown()
	}
	set := topology.Set{Prefix: prefix.ValueString()}
	for _, name := range slices.Sorted(maps.Keys(queues)) {
		q := queues[name]
		if !configKnown(q) {
			return types.StringUnknown()
		}
		tq, err := toTopology(name, q)
		if err != nil {
			// Validation reports the error.
			return types.StringUnknown()
		}
		set.Queues = append(set.Queues, tq)
	}
	data, err := json.Marshal(topology.NewRuntimeConfig(vhost.ValueString(), set))
	if err != nil {
		return types.StringUnknown()
	}
	return types.StringValue(string(data))
}
