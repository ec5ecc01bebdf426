package provider

import (
	"context"
	"maps"
	"reflect"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// This file is the planning half of Create, Update and Delete: from the
// state, the plan and one listing of the broker's queues it computes what
// changes (a changeSet) and the broker operations that carry it out. It does
// no I/O; apply.go runs the operations.

// queueSpec is a logical queue's two broker queues as the configuration
// wants them.
type queueSpec struct {
	work, dead topology.Declaration
}

func (s queueSpec) declarations() []topology.Declaration {
	return []topology.Declaration{s.work, s.dead}
}

// specFor computes a logical queue's declarations with the topology
// package, the only place queue names and arguments are spelled.
func specFor(prefix, name string, q queueModel) (queueSpec, error) {
	if err := validMaxPriority(name, q); err != nil {
		return queueSpec{}, err
	}
	tq, err := toTopology(name, q)
	if err != nil {
		return queueSpec{}, err
	}
	if err := topology.ValidateQueue(tq); err != nil {
		return queueSpec{}, err
	}
	work, dead := topology.QueueDeclarations(prefix, tq)
	return queueSpec{work: work, dead: dead}, nil
}

// matches reports whether an existing queue is what d would declare.
func matches(d topology.Declaration, q brokerQueue) bool {
	return q.Durable == d.Durable && reflect.DeepEqual(normalizeArgs(q.Arguments), normalizeArgs(d.Args))
}

// conflict returns the existing queue that d would be refused against: one
// of d's name with other arguments or durability. A queue whose migration
// was left unfinished is no conflict: declaring it finishes the migration.
func conflict(d topology.Declaration, existing map[string]brokerQueue) (brokerQueue, bool) {
	if _, unfinished := existing[topology.MigrationName(d.Name)]; unfinished {
		return brokerQueue{}, false
	}
	q, ok := existing[d.Name]
	return q, ok && !matches(d, q)
}

// changeSet is what an update does to each logical queue, decided from the
// state (what the broker had at the last read) and the plan.
type changeSet struct {
	// removed are in the state and not in the plan: deleted.
	removed []string
	// added are in the plan and not in the state: declared.
	added []string
	// replaced are in both, with broker queues whose arguments or
	// durability change: those are migrated (see replaceQueue).
	replaced map[string]queueChange
	// missing are in both, with a broker queue deleted outside Terraform
	// (readQueue left its name null): that queue is declared again.
	missing map[string]missingQueues
	// unchanged are in both and neither replaced nor missing a queue.
	unchanged []string
	// specs are the declarations of every queue added, replaced or missing.
	specs map[string]queueSpec
}

// missingQueues says which of a logical queue's broker queues are gone.
type missingQueues struct{ work, dead bool }

// planChanges compares the state's queues with the plan's, whose computed
// attributes are filled (withComputed). Its diagnostics are errors of queues
// whose declarations cannot be computed.
func planChanges(ctx context.Context, prefix string, before, after map[string]queueModel) (changeSet, diag.Diagnostics) {
	var diags diag.Diagnostics
	cs := changeSet{replaced: map[string]queueChange{}, missing: map[string]missingQueues{}, specs: map[string]queueSpec{}}
	for _, name := range sortedKeys(before) {
		if _, ok := after[name]; !ok {
			cs.removed = append(cs.removed, name)
		}
	}
	for _, name := range sortedKeys(after) {
		old, ok := before[name]
		if !ok {
			cs.added = append(cs.added, name)
			continue
		}
		c, d := replacement(ctx, old, after[name])
		diags.Append(d...)
		if c.Work || c.Dead {
			cs.replaced[name] = c
		}
		mw, md := missing(old)
		if mw || md {
			cs.missing[name] = missingQueues{work: mw, dead: md}
		}
		if !c.Work && !c.Dead && !mw && !md {
			cs.unchanged = append(cs.unchanged, name)
		}
	}
	for _, name := range append(append(append([]string{}, cs.added...), sortedKeys(cs.replaced)...), sortedKeys(cs.missing)...) {
		spec, err := specFor(prefix, name, after[name])
		if err != nil {
			diags.AddAttributeError(path.Root("queues").AtMapKey(name), "Update Queue Set Error", err.Error())
			continue
		}
		cs.specs[name] = spec
	}
	return cs, diags
}

// stepKind is what a step does to one broker queue.
type stepKind int

const (
	// stepDeclare declares the queue, which is absent or alike.
	stepDeclare stepKind = iota
	// stepMigrate replaces the queue with one of new arguments, keeping
	// its messages, or finishes a migration an earlier apply left.
	stepMigrate
	// stepDelete deletes the queue.
	stepDelete
)

// step is one broker operation on one queue.
type step struct {
	kind stepKind
	// queue is the queue to declare or migrate; of a delete, only its name
	// counts.
	queue topology.Declaration
	// ifEmpty makes the broker refuse a delete of a queue with messages.
	ifEmpty bool
}

// operation is the work for one logical queue: its steps, run in order, the
// first failure ending it. Operations run side by side.
type operation struct {
	// queue is the logical queue, which diagnostics name.
	queue string
	// remove says that the queue leaves the state once the operation
	// succeeds; otherwise it takes the plan's value.
	remove bool
	steps  []step
}

// declareStep declares d, or, when a migration of d's queue was left
// unfinished (its migration queue is listed), finishes that migration.
func declareStep(d topology.Declaration, existing map[string]brokerQueue) step {
	if _, unfinished := existing[topology.MigrationName(d.Name)]; unfinished {
		return step{kind: stepMigrate, queue: d}
	}
	return step{kind: stepDeclare, queue: d}
}

// removeSteps delete a logical queue: the divert queue an unfinished
// migration left (it sends producers into the migration queue, which is
// about to go too), its hold queues, its work queue, the migration queue an
// unfinished migration left, and its dead-letter queue, in that order, so
// that nothing dead-letters into a queue already gone. Which hold, divert
// and migration queues exist comes from existing. Without force the broker
// refuses each deletion of a queue that holds ready messages, whatever a
// lagging count said.
func removeSteps(work string, existing map[string]brokerQueue, force bool) []step {
	var names []string
	if _, ok := existing[topology.DivertName(work)]; ok {
		names = append(names, topology.DivertName(work))
	}
	names = append(names, holdQueuesOf(existing, work)...)
	names = append(names, work)
	if _, ok := existing[topology.MigrationName(work)]; ok {
		names = append(names, topology.MigrationName(work))
	}
	names = append(names, topology.DeadName(work))
	steps := make([]step, len(names))
	for i, n := range names {
		// As the queue is: a quorum queue is deleted another way, and
		// declared again as it was if messages reach it meanwhile.
		d := topology.Declaration{Name: n}
		if q, ok := existing[n]; ok {
			d.Durable, d.Args = q.Durable, q.Arguments
			if q.Type == topology.QuorumQueueType {
				d.Args = maps.Clone(q.Arguments)
				if d.Args == nil {
					d.Args = map[string]any{}
				}
				d.Args[topology.ArgQueueType] = topology.QuorumQueueType
			}
		}
		steps[i] = step{kind: stepDelete, queue: d, ifEmpty: !force}
	}
	return steps
}

// createOperations declares every queue of specs, one operation for each
// broker queue.
func createOperations(specs map[string]queueSpec, existing map[string]brokerQueue) []operation {
	var ops []operation
	for _, name := range sortedKeys(specs) {
		for _, d := range specs[name].declarations() {
			ops = append(ops, operation{queue: name, steps: []step{declareStep(d, existing)}})
		}
	}
	return ops
}

// deleteOperations removes every queue of a set.
func deleteOperations(prefix string, names []string, existing map[string]brokerQueue, force bool) []operation {
	ops := make([]operation, len(names))
	for i, name := range names {
		ops[i] = operation{queue: name, remove: true, steps: removeSteps(topology.WorkName(prefix, name), existing, force)}
	}
	return ops
}

// operations carries out cs: removals, replacements, additions and then the
// queues that only miss a broker queue, one operation for each logical
// queue.
func (cs changeSet) operations(prefix string, existing map[string]brokerQueue, force bool) []operation {
	ops := deleteOperations(prefix, cs.removed, existing, force)
	for _, name := range sortedKeys(cs.replaced) {
		c, spec, gone := cs.replaced[name], cs.specs[name], cs.missing[name]
		op := operation{queue: name}
		if c.Work {
			op.steps = append(op.steps, step{kind: stepMigrate, queue: spec.work})
		} else if gone.work {
			op.steps = append(op.steps, declareStep(spec.work, existing))
		}
		if c.Dead {
			op.steps = append(op.steps, step{kind: stepMigrate, queue: spec.dead})
		} else if gone.dead {
			op.steps = append(op.steps, declareStep(spec.dead, existing))
		}
		ops = append(ops, op)
	}
	for _, name := range cs.added {
		op := operation{queue: name}
		for _, d := range cs.specs[name].declarations() {
			op.steps = append(op.steps, declareStep(d, existing))
		}
		ops = append(ops, op)
	}
	for _, name := range sortedKeys(cs.missing) {
		if _, replaced := cs.replaced[name]; replaced {
			continue // its replacement declares it: one operation owns a queue
		}
		spec, gone := cs.specs[name], cs.missing[name]
		op := operation{queue: name}
		if gone.work {
			op.steps = append(op.steps, declareStep(spec.work, existing))
		}
		if gone.dead {
			op.steps = append(op.steps, declareStep(spec.dead, existing))
		}
		ops = append(ops, op)
	}
	return ops
}

// stateAfter is the queues map an update records: the prior state, with the
// change of each operation that succeeded (errs[i] is ops[i]'s), so that a
// partly failed apply records what it did; and the plan's values for the
// queues that did not change, since Terraform wants the state an apply
// returns to match its plan, and a plan may write a queue another way
// without changing it (message_ttl "0s" for none).
func (cs changeSet) stateAfter(before, after map[string]queueModel, ops []operation, errs []error) map[string]queueModel {
	result := make(map[string]queueModel, len(before))
	for name, q := range before {
		result[name] = q
	}
	for i, op := range ops {
		switch {
		case errs[i] != nil:
		case op.remove:
			delete(result, op.queue)
		default:
			result[op.queue] = after[op.queue]
		}
	}
	for _, name := range cs.unchanged {
		result[name] = after[name]
	}
	return result
}

// removalsHoldingMessages lists, for each removed queue with messages in
// existing, where they are; an update refuses to remove any of them without
// force_destroy. A queue whose arguments change is migrated with its
// messages, so it needs no such check.
func (cs changeSet) removalsHoldingMessages(prefix string, existing map[string]brokerQueue) map[string][]string {
	out := map[string][]string{}
	for _, name := range cs.removed {
		if held := heldMessages(existing, topology.WorkName(prefix, name), true, true, true); len(held) > 0 {
			out[name] = held
		}
	}
	return out
}
