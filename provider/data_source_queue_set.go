package provider

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

var _ datasource.DataSourceWithConfigure = (*queueSetDataSource)(nil)

// NewQueueSetDataSource is the data source queuey_queue_set: a set read
// from the broker, managed or not.
func NewQueueSetDataSource() datasource.DataSource {
	return &queueSetDataSource{}
}

type queueSetDataSource struct {
	data *providerData
}

type queueSetDataModel struct {
	ID            types.String `tfsdk:"id"`
	Vhost         types.String `tfsdk:"vhost"`
	Prefix        types.String `tfsdk:"prefix"`
	Queues        types.Map    `tfsdk:"queues"`
	RuntimeConfig types.String `tfsdk:"runtime_config"`
}

type queueDataModel struct {
	Name          types.String `tfsdk:"name"`
	DeadName      types.String `tfsdk:"dead_name"`
	MaxPriority   types.Int64  `tfsdk:"max_priority"`
	MessageTTL    types.String `tfsdk:"message_ttl"`
	Durable       types.Bool   `tfsdk:"durable"`
	Arguments     types.Map    `tfsdk:"arguments"`
	Messages      types.Int64  `tfsdk:"messages"`
	Consumers     types.Int64  `tfsdk:"consumers"`
	DeadMessages  types.Int64  `tfsdk:"dead_messages"`
	DeadConsumers types.Int64  `tfsdk:"dead_consumers"`
	HoldQueues    types.List   `tfsdk:"hold_queues"`
}

type holdQueueModel struct {
	Name     types.String `tfsdk:"name"`
	DelayMs  types.Int64  `tfsdk:"delay_ms"`
	Messages types.Int64  `tfsdk:"messages"`
}

var holdQueueType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"name": types.StringType, "delay_ms": types.Int64Type, "messages": types.Int64Type,
}}

var queueDataType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"name": types.StringType, "dead_name": types.StringType, "max_priority": types.Int64Type,
	"message_ttl": types.StringType, "durable": types.BoolType, "arguments": argsType,
	"messages": types.Int64Type, "consumers": types.Int64Type, "dead_messages": types.Int64Type,
	"dead_consumers": types.Int64Type, "hold_queues": types.ListType{ElemType: holdQueueType},
}}

func (d *queueSetDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_queue_set"
}

func (d *queueSetDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Reads a queuey queue set from the broker without managing it: every logical queue under `prefix` " +
			"(a `<prefix>.<name>` whose `<prefix>.<name>.dead` exists too), with its arguments, message and consumer counts, and the hold queues " +
			"the runtime declared for its delays. For other modules, and for `check` blocks. " +
			"Counts come from the management API, which refreshes them every few seconds.",
		Attributes: map[string]schema.Attribute{
			// Required.
			"prefix": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Prefix of the set.",
			},
			// Optional.
			"vhost": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Virtual host of the set. (default: `/`)",
			},
			// Computed.
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`<prefix>@<vhost>`, the resource's import id.",
			},
			"runtime_config": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The set as JSON in the form the queuey Go runtime reads, as the resource's `runtime_config`, from the queues as the broker has them.",
			},
			"queues": schema.MapNestedAttribute{
				Computed:            true,
				MarkdownDescription: "The logical queues found, keyed by logical name.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"name":           schema.StringAttribute{Computed: true, MarkdownDescription: "Name of the work queue, `<prefix>.<name>`."},
					"dead_name":      schema.StringAttribute{Computed: true, MarkdownDescription: "Name of the dead-letter queue."},
					"max_priority":   schema.Int64Attribute{Computed: true, MarkdownDescription: "`x-max-priority` of the work queue; `0` when it is not a priority queue."},
					"message_ttl":    schema.StringAttribute{Computed: true, MarkdownDescription: "`x-message-ttl` of the work queue as a duration, such as `\"1m30s\"`; null when it has none."},
					"durable":        schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the work queue is durable."},
					"arguments":      schema.MapAttribute{Computed: true, ElementType: types.Int64Type, MarkdownDescription: "Arguments of the work queue, as numbers."},
					"messages":       schema.Int64Attribute{Computed: true, MarkdownDescription: "Messages in the work queue, ready and unacknowledged."},
					"consumers":      schema.Int64Attribute{Computed: true, MarkdownDescription: "Consumers of the work queue."},
					"dead_messages":  schema.Int64Attribute{Computed: true, MarkdownDescription: "Dead letters waiting in the dead-letter queue."},
					"dead_consumers": schema.Int64Attribute{Computed: true, MarkdownDescription: "Consumers of the dead-letter queue (usually none)."},
					"hold_queues": schema.ListNestedAttribute{
						Computed:            true,
						MarkdownDescription: "Hold queues of the work queue (`<prefix>.<name>.deferred.<ms>`), by delay.",
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"name":     schema.StringAttribute{Computed: true, MarkdownDescription: "Name of the hold queue."},
							"delay_ms": schema.Int64Attribute{Computed: true, MarkdownDescription: "Its delay (`x-message-ttl`) in milliseconds."},
							"messages": schema.Int64Attribute{Computed: true, MarkdownDescription: "Messages waiting in it."},
						}},
					},
				}},
			},
		},
	}
}

func (d *queueSetDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if req.ProviderData == nil {
		return
	}
	data, ok := req.ProviderData.(*providerData)
	if !ok {
		resp.Diagnostics.AddError("Unexpected Provider Data",
			fmt.Sprintf("The queue set data source was given provider data of type %T. This is a bug in the provider; please report it.", req.ProviderData))
		return
	}
	d.data = data
}

func (d *queueSetDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	if d.data == nil {
		resp.Diagnostics.AddError("Provider Not Configured",
			"The queuey provider has no broker to talk to yet, because its settings depend on values not known until apply. "+
				"Set endpoint, username and password to known values, or apply the resources they depend on first.")
		return
	}
	var m queueSetDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if m.Vhost.IsNull() {
		m.Vhost = types.StringValue("/")
	}
	vhost, prefix := m.Vhost.ValueString(), m.Prefix.ValueString()
	if err := topology.ValidatePrefix(prefix); err != nil {
		resp.Diagnostics.AddError("Invalid Queue Set Prefix", err.Error())
		return
	}
	existing, err := d.data.broker.listQueueStats(vhost)
	if err != nil {
		if errors.Is(err, errVhostNotFound) {
			resp.Diagnostics.AddError("Virtual Host Not Found",
				fmt.Sprintf("RabbitMQ at %s has no virtual host %q. Set vhost to one that exists.", d.data.broker.endpoint, vhost))
			return
		}
		s, detail := d.data.broker.brokerDiagnostic("Read Queue Set Error", fmt.Sprintf("list the queues of virtual host %q", vhost), err)
		resp.Diagnostics.AddError(s, detail)
		return
	}
	names := discover(prefix, existing)
	if len(names) == 0 {
		resp.Diagnostics.Append(setNotFound(vhost, prefix))
		return
	}
	holds := map[string][]holdQueueModel{}
	var holdNames []string
	for n := range existing {
		holdNames = append(holdNames, n)
	}
	sort.Strings(holdNames)
	for _, n := range holdNames {
		if work, ttl, ok := topology.ParseHoldName(n); ok && strings.HasPrefix(work, prefix+".") {
			holds[work] = append(holds[work], holdQueueModel{Name: types.StringValue(n), DelayMs: types.Int64Value(ttl), Messages: types.Int64Value(existing[n].Messages)})
		}
	}
	queues := map[string]queueDataModel{}
	models := map[string]queueModel{}
	for _, name := range names {
		work := topology.WorkName(prefix, name)
		wq, dq := existing[work], existing[topology.DeadName(work)]
		q, problems := fromBroker(name, wq, dq, nil)
		for _, problem := range problems {
			resp.Diagnostics.AddWarning("Queue Differs From What Queuey Declares", problem+".")
		}
		models[name] = q
		hs := holds[work]
		sort.Slice(hs, func(i, j int) bool { return hs[i].DelayMs.ValueInt64() < hs[j].DelayMs.ValueInt64() })
		hl, diags := types.ListValueFrom(ctx, holdQueueType, append([]holdQueueModel{}, hs...))
		resp.Diagnostics.Append(diags...)
		queues[name] = queueDataModel{
			Name: q.Name, DeadName: q.DeadName, MaxPriority: q.MaxPriority, MessageTTL: q.MessageTTL.StringValue,
			Durable: q.Durable, Arguments: q.Arguments,
			Messages: types.Int64Value(wq.Messages), Consumers: types.Int64Value(wq.Consumers),
			DeadMessages: types.Int64Value(dq.Messages), DeadConsumers: types.Int64Value(dq.Consumers),
			HoldQueues: hl,
		}
	}
	v, diags := types.MapValueFrom(ctx, queueDataType, queues)
	resp.Diagnostics.Append(diags...)
	m.Queues = v
	m.ID = types.StringValue(formatID(vhost, prefix))
	m.RuntimeConfig = runtimeConfig(m.Vhost, m.Prefix, models)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
