package provider

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// describe writes ops as text, one operation a line: `a: declare app.a;
// delete-if-empty app.a.dead`, with "(remove)" after the name of one that
// removes its queue from the state.
func describe(ops []operation) []string {
	out := []string{}
	for _, op := range ops {
		var b strings.Builder
		b.WriteString(op.queue)
		if op.remove {
			b.WriteString(" (remove)")
		}
		b.WriteString(":")
		for i, s := range op.steps {
			if i > 0 {
				b.WriteString(";")
			}
			verb := [...]string{stepDeclare: "declare", stepMigrate: "migrate", stepDelete: "delete"}[s.kind]
			if s.kind == stepDelete && s.ifEmpty {
				verb = "delete-if-empty"
			}
			b.WriteString(" " + verb + " " + s.queue.Name)
		}
		out = append(out, b.String())
	}
	return out
}

// planned is queue name of set "app" as a plan has it, computed values
// filled: max priority p, durable as given, no TTL.
func planned(name string, p int64, durable bool) queueModel {
	return withComputed("app", name, queueModel{MaxPriority: types.Int64Value(p), Durable: types.BoolValue(durable), MessageTTL: ttlNull()})
}

// withoutWork and withoutDead are q as Read leaves it when that broker queue
// was deleted outside Terraform.
func withoutWork(q queueModel) queueModel { q.Name = types.StringNull(); return q }
func withoutDead(q queueModel) queueModel { q.DeadName = types.StringNull(); return q }

// withDeadArgs is q as Read leaves it when its dead-letter queue has
// arguments queuey never sets.
func withDeadArgs(q queueModel, args map[string]int64) queueModel {
	q.DeadArguments = argsValue(args)
	return q
}

func TestPlanChanges(t *testing.T) {
	t.Parallel()
	a := planned("a", 10, true)
	for _, c := range []struct {
		why           string
		before, after map[string]queueModel
		removed       []string
		added         []string
		replaced      map[string]queueChange
		missing       map[string]missingQueues
		unchanged     []string
	}{{
		why:    "nothing changes",
		before: map[string]queueModel{"a": a}, after: map[string]queueModel{"a": a},
		unchanged: []string{"a"},
	}, {
		why:    "a queue is added and one removed",
		before: map[string]queueModel{"a": a, "b": planned("b", 1, true)}, after: map[string]queueModel{"a": a, "c": planned("c", 1, true)},
		removed: []string{"b"}, added: []string{"c"}, unchanged: []string{"a"},
	}, {
		why:    "the max priority changes",
		before: map[string]queueModel{"a": a}, after: map[string]queueModel{"a": planned("a", 5, true)},
		replaced: map[string]queueChange{"a": {Work: true, Reason: "x-max-priority 10 → 5"}},
	}, {
		why:    "durability changes",
		before: map[string]queueModel{"a": a}, after: map[string]queueModel{"a": planned("a", 10, false)},
		replaced: map[string]queueChange{"a": {Work: true, Reason: "durable true → false"}},
	}, {
		why:    "the work queue is gone: declared again, not replaced",
		before: map[string]queueModel{"a": withoutWork(a)}, after: map[string]queueModel{"a": a},
		missing: map[string]missingQueues{"a": {work: true}},
	}, {
		why:    "the work queue is gone and the configuration changes: its arguments do not count",
		before: map[string]queueModel{"a": withoutWork(a)}, after: map[string]queueModel{"a": planned("a", 5, false)},
		missing: map[string]missingQueues{"a": {work: true}},
	}, {
		why:    "the dead-letter queue is gone and the work queue changes",
		before: map[string]queueModel{"a": withoutDead(a)}, after: map[string]queueModel{"a": planned("a", 5, true)},
		replaced: map[string]queueChange{"a": {Work: true, Reason: "x-max-priority 10 → 5"}},
		missing:  map[string]missingQueues{"a": {dead: true}},
	}, {
		why:    "the dead-letter queue drifted",
		before: map[string]queueModel{"a": withDeadArgs(a, map[string]int64{"x-message-ttl": 1000})}, after: map[string]queueModel{"a": a},
		replaced: map[string]queueChange{"a": {Dead: true, Reason: "dead-letter queue x-message-ttl 1000 → (none)"}},
	}, {
		why:    "an empty state (after an import that found nothing)",
		before: map[string]queueModel{}, after: map[string]queueModel{"b": planned("b", 1, true), "a": a},
		added: []string{"a", "b"},
	}} {
		t.Run(c.why, func(t *testing.T) {
			t.Parallel()
			cs, diags := planChanges(context.Background(), "app", c.before, c.after)
			if diags.HasError() {
				t.Fatal(diags)
			}
			if c.replaced == nil {
				c.replaced = map[string]queueChange{}
			}
			if c.missing == nil {
				c.missing = map[string]missingQueues{}
			}
			if !reflect.DeepEqual(cs.removed, c.removed) || !reflect.DeepEqual(cs.added, c.added) || !reflect.DeepEqual(cs.unchanged, c.unchanged) {
				t.Errorf("removed %v added %v unchanged %v, want %v %v %v", cs.removed, cs.added, cs.unchanged, c.removed, c.added, c.unchanged)
			}
			if !reflect.DeepEqual(cs.replaced, c.replaced) || !reflect.DeepEqual(cs.missing, c.missing) {
				t.Errorf("replaced %+v missing %+v, want %+v %+v", cs.replaced, cs.missing, c.replaced, c.missing)
			}
			for _, name := range append(append(append([]string{}, c.added...), sortedKeys(c.replaced)...), sortedKeys(c.missing)...) {
				if _, ok := cs.specs[name]; !ok {
					t.Errorf("no declarations computed for %q", name)
				}
			}
		})
	}
}

// A queue whose declarations cannot be computed (a value unknown at plan
// time turned out invalid) stops the update before anything is listed.
func TestPlanChangesReportsAQueueItCannotDeclare(t *testing.T) {
	t.Parallel()
	cs, diags := planChanges(context.Background(), "app", map[string]queueModel{}, map[string]queueModel{"v256": planned("v256", 300, true)})
	if diags.ErrorsCount() != 1 || diags.Errors()[0].Summary() != "Update Queue Set Error" ||
		!strings.Contains(diags.Errors()[0].Detail(), `queue "v256": max priority 300 is out of range`) {
		t.Fatalf("diagnostics %v", diags)
	}
	if _, ok := cs.specs["v256"]; ok {
		t.Errorf("declarations computed for an invalid queue")
	}
}

func TestOperations(t *testing.T) {
	t.Parallel()
	a, b := planned("a", 10, true), planned("b", 10, true)
	listed := func(names ...string) map[string]brokerQueue {
		m := map[string]brokerQueue{}
		for _, n := range names {
			m[n] = brokerQueue{Name: n, Durable: true}
		}
		return m
	}
	for _, c := range []struct {
		why           string
		before, after map[string]queueModel
		existing      map[string]brokerQueue
		force         bool
		want          []string
	}{{
		why:    "nothing changes",
		before: map[string]queueModel{"a": a}, after: map[string]queueModel{"a": a},
		existing: listed("app.a", "app.a.dead"),
		want:     []string{},
	}, {
		why:    "a removal deletes the divert queue, hold queues, work, migration and dead-letter queue, in that order",
		before: map[string]queueModel{"a": a, "b": b}, after: map[string]queueModel{"a": a},
		existing: listed("app.a", "app.a.dead", "app.b", "app.b.dead", "app.b.deferred.2000", "app.b.deferred.1000",
			"app.b.migrating", "app.b.migrating.divert", "app.bb.deferred.1000"),
		want: []string{"b (remove): delete-if-empty app.b.migrating.divert; delete-if-empty app.b.deferred.1000; delete-if-empty app.b.deferred.2000; " +
			"delete-if-empty app.b; delete-if-empty app.b.migrating; delete-if-empty app.b.dead"},
	}, {
		why:    "force_destroy deletes without the broker's check",
		before: map[string]queueModel{"b": b}, after: map[string]queueModel{},
		existing: listed("app.b", "app.b.dead"), force: true,
		want: []string{"b (remove): delete app.b; delete app.b.dead"},
	}, {
		why:    "a changed work queue is migrated, its dead-letter queue left alone",
		before: map[string]queueModel{"a": a}, after: map[string]queueModel{"a": planned("a", 5, true)},
		existing: listed("app.a", "app.a.dead"),
		want:     []string{"a: migrate app.a"},
	}, {
		why:    "a changed work queue whose dead-letter queue is gone: migrated, and the dead-letter queue declared",
		before: map[string]queueModel{"a": withoutDead(a)}, after: map[string]queueModel{"a": planned("a", 5, true)},
		existing: listed("app.a"),
		want:     []string{"a: migrate app.a; declare app.a.dead"},
	}, {
		why:    "a dead-letter queue with drifted arguments is migrated, its work queue left alone",
		before: map[string]queueModel{"a": withDeadArgs(a, map[string]int64{"x-message-ttl": 1000})}, after: map[string]queueModel{"a": a},
		existing: listed("app.a", "app.a.dead"),
		want:     []string{"a: migrate app.a.dead"},
	}, {
		why:    "a changed dead-letter queue whose work queue is gone: the work queue declared, then the dead-letter queue migrated",
		before: map[string]queueModel{"a": withoutWork(withDeadArgs(a, map[string]int64{"x-message-ttl": 1000}))}, after: map[string]queueModel{"a": a},
		existing: listed("app.a.dead"),
		want:     []string{"a: declare app.a; migrate app.a.dead"},
	}, {
		why:    "a missing dead-letter queue is declared again, alone",
		before: map[string]queueModel{"a": withoutDead(a)}, after: map[string]queueModel{"a": a},
		existing: listed("app.a"),
		want:     []string{"a: declare app.a.dead"},
	}, {
		why:    "a missing work queue is declared again, alone",
		before: map[string]queueModel{"a": withoutWork(a)}, after: map[string]queueModel{"a": a},
		existing: listed("app.a.dead"),
		want:     []string{"a: declare app.a"},
	}, {
		why:    "an added queue whose migration an earlier apply left is migrated: the migration is finished",
		before: map[string]queueModel{}, after: map[string]queueModel{"a": a},
		existing: listed("app.a.migrating", "app.a.dead"),
		want:     []string{"a: migrate app.a; declare app.a.dead"},
	}, {
		why:      "removals, replacements, additions, then restorations",
		before:   map[string]queueModel{"a": withoutWork(a), "b": b, "c": planned("c", 1, true)},
		after:    map[string]queueModel{"a": a, "b": planned("b", 1, true), "d": planned("d", 1, true)},
		existing: listed("app.a.dead", "app.b", "app.b.dead", "app.c", "app.c.dead"),
		want: []string{
			"c (remove): delete-if-empty app.c; delete-if-empty app.c.dead",
			"b: migrate app.b",
			"d: declare app.d; declare app.d.dead",
			"a: declare app.a",
		},
	}} {
		t.Run(c.why, func(t *testing.T) {
			t.Parallel()
			cs, diags := planChanges(context.Background(), "app", c.before, c.after)
			if diags.HasError() {
				t.Fatal(diags)
			}
			got := describe(cs.operations("app", c.existing, c.force))
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("operations\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// A partly failed update records what it did: the operations that
// succeeded, and the plan's values for the queues that did not change.
func TestStateAfterRecordsWhatSucceeded(t *testing.T) {
	t.Parallel()
	before := map[string]queueModel{
		"a": planned("a", 10, true), "b": planned("b", 10, true), "c": planned("c", 10, true),
		"d": planned("d", 10, true), "e": planned("e", 10, true),
	}
	after := map[string]queueModel{
		"a": planned("a", 10, true), // unchanged
		"b": planned("b", 5, true),  // replaced: fails
		"c": planned("c", 5, true),  // replaced: succeeds
		"f": planned("f", 1, true),  // added: fails
		"g": planned("g", 1, true),  // added: succeeds
	} // d removed: succeeds; e removed: fails
	// The plan writes the unchanged queue another way; the state takes it.
	unchanged := after["a"]
	unchanged.MessageTTL = ttlString("0s")
	after["a"] = unchanged

	cs, diags := planChanges(context.Background(), "app", before, after)
	if diags.HasError() {
		t.Fatal(diags)
	}
	ops := cs.operations("app", map[string]brokerQueue{}, false)
	fail := map[string]bool{"b": true, "f": true, "e": true}
	errs := make([]error, len(ops))
	for i, op := range ops {
		if fail[op.queue] {
			errs[i] = errors.New("refused")
		}
	}
	got := cs.stateAfter(before, after, ops, errs)
	want := map[string]queueModel{
		"a": unchanged, "b": before["b"], "c": after["c"], "e": before["e"], "g": after["g"],
	}
	if !reflect.DeepEqual(sortedKeys(got), sortedKeys(want)) {
		t.Fatalf("state has queues %v, want %v", sortedKeys(got), sortedKeys(want))
	}
	for name, q := range want {
		if !reflect.DeepEqual(got[name], q) {
			t.Errorf("queue %q recorded as %+v, want %+v", name, got[name], q)
		}
	}
}

func TestRemovalsHoldingMessages(t *testing.T) {
	t.Parallel()
	cs := changeSet{removed: []string{"a", "b"}}
	existing := map[string]brokerQueue{
		"app.a": {Name: "app.a"}, "app.a.dead": {Name: "app.a.dead", Messages: 2},
		"app.b": {Name: "app.b"}, "app.b.dead": {Name: "app.b.dead"},
		"app.c": {Name: "app.c", Messages: 5}, // not removed
	}
	got := cs.removalsHoldingMessages("app", existing)
	want := map[string][]string{"a": {`queue "app.a.dead" holds 2 messages`}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("removalsHoldingMessages = %q, want %q", got, want)
	}
}

func TestCreateOperationsAndConflicts(t *testing.T) {
	t.Parallel()
	spec, err := specFor("app", "a", planned("a", 10, true))
	if err != nil {
		t.Fatal(err)
	}
	existing := map[string]brokerQueue{
		// What the management API returns: numbers as float64.
		"app.a":      {Name: "app.a", Durable: true, Arguments: map[string]any{topology.ArgMaxPriority: float64(10)}},
		"app.a.dead": {Name: "app.a.dead", Durable: false, Arguments: map[string]any{}},
	}
	if _, refused := conflict(spec.work, existing); refused {
		t.Errorf("the work queue, alike but for JSON's float64, conflicts")
	}
	if q, refused := conflict(spec.dead, existing); !refused || q.Name != "app.a.dead" {
		t.Errorf("a non-durable dead-letter queue does not conflict")
	}
	existing["app.a.dead.migrating"] = brokerQueue{Name: "app.a.dead.migrating", Durable: true}
	if _, refused := conflict(spec.dead, existing); refused {
		t.Errorf("a queue whose migration was left unfinished conflicts; declaring it should finish the migration")
	}
	got := describe(createOperations(map[string]queueSpec{"a": spec}, existing))
	if want := []string{"a: declare app.a", "a: migrate app.a.dead"}; !reflect.DeepEqual(got, want) {
		t.Errorf("createOperations = %q, want %q", got, want)
	}
}
