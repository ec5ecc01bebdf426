package provider

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/queuey/terraform-provider-queuey/provider/internal/migrate"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// This file and changes.go are the pure half of the queue set resource. This
// one holds ids, the mapping between Terraform values and the topology
// package, what the broker's queues say a queue's configuration is and where
// their messages are, and the diff of one queue. None of it does I/O, so all
// of it is unit-tested.

// queueModel is one element of the queues map.
type queueModel struct {
	MaxPriority   types.Int64  `tfsdk:"max_priority"`
	MessageTTL    ttlValue     `tfsdk:"message_ttl"`
	Durable       types.Bool   `tfsdk:"durable"`
	QueueType     types.String `tfsdk:"queue_type"`
	Name          types.String `tfsdk:"name"`
	DeadName      types.String `tfsdk:"dead_name"`
	Arguments     types.Map    `tfsdk:"arguments"`
	DeadArguments types.Map    `tfsdk:"dead_arguments"`
}

// argsType is the type of the computed argument maps: integers only, because
// every argument of a work or dead queue is an integer, and a number stays a
// number in state and plan output.
var argsType = types.MapType{ElemType: types.Int64Type}

// queueObjectType is the object type of queueModel.
var queueObjectType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"max_priority":   types.Int64Type,
	"message_ttl":    ttlType{},
	"durable":        types.BoolType,
	"queue_type":     types.StringType,
	"name":           types.StringType,
	"dead_name":      types.StringType,
	"arguments":      argsType,
	"dead_arguments": argsType,
}}

// idEscaper escapes the two characters that would make an id ambiguous.
var idEscaper = strings.NewReplacer("%", "%25", "@", "%40")

// formatID makes the resource id and import id, "<prefix>@<vhost>", e.g.
// "myapp@/". A '@' or '%' inside either part is percent-encoded.
func formatID(vhost, prefix string) string {
	return idEscaper.Replace(prefix) + "@" + idEscaper.Replace(vhost)
}

// parseID reads an id written by formatID. An id without '@' is a prefix in
// the default virtual host "/".
func parseID(id string) (vhost, prefix string, err error) {
	rawPrefix, rawVhost := id, "/"
	if i := strings.LastIndex(id, "@"); i >= 0 {
		rawPrefix, rawVhost = id[:i], id[i+1:]
	}
	if prefix, err = url.PathUnescape(rawPrefix); err != nil {
		return "", "", fmt.Errorf("the prefix part %q is not valid percent-encoding: %w", rawPrefix, err)
	}
	if vhost, err = url.PathUnescape(rawVhost); err != nil {
		return "", "", fmt.Errorf("the virtual host part %q is not valid percent-encoding: %w", rawVhost, err)
	}
	if vhost == "" {
		return "", "", fmt.Errorf("the virtual host after '@' is empty: write \"%s@/\" for the default virtual host", rawPrefix)
	}
	if err := topology.ValidatePrefix(prefix); err != nil {
		return "", "", err
	}
	return vhost, prefix, nil
}

// configKnown reports whether every configurable attribute of q is known,
// which is what computing its names and arguments needs.
func configKnown(q queueModel) bool {
	return !q.MaxPriority.IsUnknown() && !q.MessageTTL.IsUnknown() && !q.Durable.IsUnknown() && !q.QueueType.IsUnknown()
}

// toTopology resolves a configured queue to the topology package's Queue.
// Null values take the schema defaults, which only matters for values that
// have not been through the framework's defaults yet (validation).
func toTopology(name string, q queueModel) (topology.Queue, error) {
	tq := topology.Queue{Name: name, MaxPriority: topology.DefaultMaxPriority, Durable: true}
	if !q.QueueType.IsNull() && q.QueueType.ValueString() != topology.DefaultQueueType {
		tq.Type = q.QueueType.ValueString()
	}
	if tq.Quorum() {
		tq.MaxPriority = 0 // quorum queues take no x-max-priority
	}
	if !q.MaxPriority.IsNull() {
		p := q.MaxPriority.ValueInt64()
		// Clamp into int range for the topology check to report; the value
		// itself appears in its message.
		if p > int64(topology.MaxPriorityLimit)+1 {
			p = int64(topology.MaxPriorityLimit) + 1
		}
		if p < -1 {
			p = -1
		}
		tq.MaxPriority = int(p)
	}
	if !q.MessageTTL.IsNull() {
		d, err := parseTTL(q.MessageTTL.ValueString())
		if err != nil {
			return tq, err
		}
		tq.MessageTTL = d
	}
	if !q.Durable.IsNull() {
		tq.Durable = q.Durable.ValueBool()
	}
	return tq, nil
}

// intArgs keeps the integer arguments of a queue, the only kind a work or
// dead queue has. It reports whether it dropped any other.
func intArgs(args map[string]any) (map[string]int64, bool) {
	out := make(map[string]int64, len(args))
	dropped := false
	for k, v := range args {
		if n, ok := v.(int64); ok {
			out[k] = n
		} else {
			dropped = true
		}
	}
	return out, dropped
}

func argsValue(args map[string]int64) types.Map {
	elems := make(map[string]attr.Value, len(args))
	for k, v := range args {
		elems[k] = types.Int64Value(v)
	}
	return types.MapValueMust(types.Int64Type, elems)
}

// withComputed returns q with its computed attributes filled from its
// configuration: the broker names and the arguments the topology package
// gives them. They are unknown while the configuration is.
func withComputed(prefix, name string, q queueModel) queueModel {
	work := topology.WorkName(prefix, name)
	q.Name = types.StringValue(work)
	q.DeadName = types.StringValue(topology.DeadName(work))
	q.DeadArguments = types.MapUnknown(types.Int64Type)
	if !q.QueueType.IsUnknown() {
		dead, _ := intArgs(topology.DeadArgs(typeOf(q)))
		q.DeadArguments = argsValue(dead)
	}
	if !configKnown(q) {
		q.Arguments = types.MapUnknown(types.Int64Type)
		return q
	}
	tq, err := toTopology(name, q)
	if err != nil {
		// Validation reports the error; leave the value to apply.
		q.Arguments = types.MapUnknown(types.Int64Type)
		return q
	}
	work2, _ := intArgs(topology.WorkArgs(tq))
	q.Arguments = argsValue(work2)
	return q
}

// typeOf is q's queue type as the topology package spells it: "" for
// classic.
func typeOf(q queueModel) string {
	if q.QueueType.IsNull() || q.QueueType.IsUnknown() || q.QueueType.ValueString() == topology.DefaultQueueType {
		return ""
	}
	return q.QueueType.ValueString()
}

// withoutType is args less the queue type, which the queue_type attribute
// shows instead of the integer argument maps.
func withoutType(args map[string]any) map[string]any {
	if _, ok := args[topology.ArgQueueType]; !ok {
		return args
	}
	out := make(map[string]any, len(args))
	for k, v := range args {
		if k != topology.ArgQueueType {
			out[k] = v
		}
	}
	return out
}

// fromBroker is what the broker says logical queue name is: the
// configuration that would declare work and dead as they are, message_ttl
// in its canonical form ("1m30s"); the framework keeps a prior "90s" in its
// place (see ttlValue). prior is the queue's previous state, if any. The
// second result lists what the model cannot show (a string argument, a
// stream queue, a dead-letter queue of another type than its work queue),
// for a warning.
func fromBroker(name string, work, dead brokerQueue, prior *queueModel) (queueModel, []string) {
	var problems []string
	args, dropped := intArgs(withoutType(work.Arguments))
	if dropped {
		problems = append(problems, fmt.Sprintf("queue %q has arguments that are not integers (%s); queuey never sets those", work.Name, migrate.FormatArgs(work.Arguments)))
	}
	deadArgs, dropped := intArgs(withoutType(dead.Arguments))
	if dropped {
		problems = append(problems, fmt.Sprintf("queue %q has arguments that are not integers (%s); queuey never sets those", dead.Name, migrate.FormatArgs(dead.Arguments)))
	}
	workType, deadType := brokerType(work), brokerType(dead)
	for _, q := range []brokerQueue{work, dead} {
		if t := brokerType(q); t != topology.DefaultQueueType && t != topology.QuorumQueueType {
			problems = append(problems, fmt.Sprintf("queue %q is a %s queue; queuey declares classic and quorum queues only", q.Name, t))
		}
	}
	if deadType != workType {
		problems = append(problems, fmt.Sprintf("queue %q is a %s queue but its work queue %q is %s; queuey declares both with the set's queue_type", dead.Name, deadType, work.Name, workType))
	}
	if !dead.Durable {
		problems = append(problems, fmt.Sprintf("queue %q is not durable; queuey declares dead-letter queues durable", dead.Name))
	}

	q := queueModel{
		MaxPriority:   types.Int64Value(args[topology.ArgMaxPriority]),
		Durable:       types.BoolValue(work.Durable),
		QueueType:     types.StringValue(workType),
		Name:          types.StringValue(work.Name),
		DeadName:      types.StringValue(dead.Name),
		Arguments:     argsValue(args),
		DeadArguments: argsValue(deadArgs),
		MessageTTL:    ttlNull(),
	}
	if ttl, hasTTL := args[topology.ArgMessageTTL]; hasTTL {
		q.MessageTTL = ttlString(formatTTL(time.Duration(ttl) * time.Millisecond))
	} else if prior != nil && !prior.MessageTTL.IsNull() && !prior.MessageTTL.IsUnknown() {
		// A prior "0s" declares no TTL, as leaving it out does. Semantic
		// equality never compares a value with null, so keep it here.
		if d, err := parseTTL(prior.MessageTTL.ValueString()); err == nil && d == 0 {
			q.MessageTTL = prior.MessageTTL
		}
	}
	return q, problems
}

// brokerType is q's type, DefaultQueueType when the broker says none.
func brokerType(q brokerQueue) string {
	if q.Type == "" {
		return topology.DefaultQueueType
	}
	return q.Type
}

// readQueue is what the broker says logical queue name of a set is, given
// the vhost's queues, or false when neither of its queues exists: then it
// leaves the state, and the plan declares it back as an added queue.
//
// When just one of the two is gone, the queue stays, with the missing
// queue's name null, so that the plan shows that name coming back and the
// apply declares just that queue; the one that is left keeps being managed,
// and a destroy still deletes it (after checking it for messages).
func readQueue(prefix, name string, existing map[string]brokerQueue, prior *queueModel) (queueModel, bool, []string) {
	work := topology.WorkName(prefix, name)
	dead := topology.DeadName(work)
	wq, okW := existing[work]
	dq, okD := existing[dead]
	if okW && okD {
		q, problems := fromBroker(name, wq, dq, prior)
		return q, true, problems
	}
	if (!okW && !okD) || prior == nil {
		return queueModel{}, false, nil
	}
	// Stand in for the missing queue with what the prior state said.
	priorType := topology.DefaultQueueType
	if t := typeOf(*prior); t != "" {
		priorType = t
	}
	if !okW {
		wq = brokerQueue{Name: work, Durable: prior.Durable.ValueBool(), Type: brokerType(dq)}
	}
	if !okD {
		dq = brokerQueue{Name: dead, Durable: topology.DeadDurable, Type: brokerType(wq)}
	}
	if !okW && !okD {
		wq.Type, dq.Type = priorType, priorType
	}
	q, problems := fromBroker(name, wq, dq, prior)
	if !okW {
		q.MaxPriority, q.MessageTTL, q.Durable, q.Arguments = prior.MaxPriority, prior.MessageTTL, prior.Durable, prior.Arguments
		if !prior.QueueType.IsNull() {
			q.QueueType = prior.QueueType
		}
		q.Name = types.StringNull()
	}
	if !okD {
		q.DeadArguments = prior.DeadArguments
		q.DeadName = types.StringNull()
	}
	return q, true, problems
}

// missing reports which of a queue's two broker queues readQueue found
// gone.
func missing(q queueModel) (work, dead bool) {
	return q.Name.IsNull(), q.DeadName.IsNull()
}

// replacement says which of a queue's broker queues must be replaced to
// go from before to after. A queue that is missing is not replaced but
// declared again, so its arguments do not count.
func replacement(ctx context.Context, before, after queueModel) (queueChange, diag.Diagnostics) {
	mw, md := missing(before)
	if mw {
		before.Arguments, before.Durable, before.QueueType = after.Arguments, after.Durable, after.QueueType
	}
	if md {
		before.DeadArguments = after.DeadArguments
	}
	return diffQueue(ctx, before, after)
}

// discover finds the queue sets' logical queues among a virtual host's
// queues, for import: a queue "<prefix>.<name>" is a work queue when
// "<prefix>.<name>.dead" exists too, and it is neither a hold queue nor the
// dead-letter queue of a shorter work queue.
func discover(prefix string, queues map[string]brokerQueue) []string {
	names := make([]string, 0, len(queues))
	for n := range queues {
		names = append(names, n)
	}
	// Shorter names first, so that "p.x" claims "p.x.dead" before "p.x.dead"
	// could be taken for a work queue of its own.
	sort.Slice(names, func(i, j int) bool {
		if len(names[i]) != len(names[j]) {
			return len(names[i]) < len(names[j])
		}
		return names[i] < names[j]
	})
	claimed := map[string]bool{}
	var logical []string
	head := prefix + "."
	for _, n := range names {
		if !strings.HasPrefix(n, head) || len(n) == len(head) || claimed[n] {
			continue
		}
		if _, _, hold := topology.ParseHoldName(n); hold {
			continue
		}
		dead := topology.DeadName(n)
		if _, ok := queues[dead]; !ok {
			continue
		}
		claimed[dead] = true
		logical = append(logical, strings.TrimPrefix(n, head))
	}
	sort.Strings(logical)
	return logical
}

// queueChange says why a queue present before and after a plan must be
// replaced, or is empty when it need not be.
type queueChange struct {
	// Work and Dead are set when that broker queue must be declared again.
	Work, Dead bool
	// Reason is "x-max-priority 10 → 5; durable true → false" and the like.
	Reason string
}

// diffQueue compares a queue's state (what the broker has) with its plan.
// Only the arguments and durability count: a message_ttl of "90s" against
// "1m30s" is the same queue.
func diffQueue(ctx context.Context, before, after queueModel) (queueChange, diag.Diagnostics) {
	var diags diag.Diagnostics
	var c queueChange
	var reasons []string
	if after.Arguments.IsUnknown() || after.Durable.IsUnknown() {
		return c, diags
	}
	oldArgs, d := mapInts(ctx, before.Arguments)
	diags.Append(d...)
	newArgs, d := mapInts(ctx, after.Arguments)
	diags.Append(d...)
	if r := argDiff(oldArgs, newArgs); r != "" {
		c.Work = true
		reasons = append(reasons, r)
	}
	if before.Durable.ValueBool() != after.Durable.ValueBool() {
		c.Work = true
		reasons = append(reasons, fmt.Sprintf("durable %t → %t", before.Durable.ValueBool(), after.Durable.ValueBool()))
	}
	// A state written before queue_type existed has none: classic.
	if bt, at := typeName(before), typeName(after); !after.QueueType.IsUnknown() && bt != at {
		c.Work, c.Dead = true, true
		reasons = append(reasons, fmt.Sprintf("queue type %s → %s", bt, at))
	}
	oldDead, d := mapInts(ctx, before.DeadArguments)
	diags.Append(d...)
	newDead, d := mapInts(ctx, after.DeadArguments)
	diags.Append(d...)
	if r := argDiff(oldDead, newDead); r != "" {
		c.Dead = true
		reasons = append(reasons, "dead-letter queue "+r)
	}
	c.Reason = strings.Join(reasons, "; ")
	return c, diags
}

// typeName is q's queue type, DefaultQueueType when it has none.
func typeName(q queueModel) string {
	if t := typeOf(q); t != "" {
		return t
	}
	return topology.DefaultQueueType
}

// argDiff describes how two argument maps differ, "" when they do not.
func argDiff(before, after map[string]int64) string {
	keys := map[string]bool{}
	for k := range before {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var parts []string
	for _, k := range sorted {
		b, inB := before[k]
		a, inA := after[k]
		switch {
		case inB && inA && a == b:
		case inB && inA:
			parts = append(parts, fmt.Sprintf("%s %d → %d", k, b, a))
		case inA:
			parts = append(parts, fmt.Sprintf("%s (none) → %d", k, a))
		default:
			parts = append(parts, fmt.Sprintf("%s %d → (none)", k, b))
		}
	}
	return strings.Join(parts, ", ")
}

func mapInts(ctx context.Context, m types.Map) (map[string]int64, diag.Diagnostics) {
	out := map[string]int64{}
	if m.IsNull() || m.IsUnknown() {
		return out, nil
	}
	diags := m.ElementsAs(ctx, &out, false)
	return out, diags
}

// sortedKeys returns the keys of m in order, so that operations and
// messages come out the same on every run.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
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
