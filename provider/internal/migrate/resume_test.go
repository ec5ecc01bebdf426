package migrate

import (
	"fmt"
	"slices"
	"testing"
)

var (
	allSteps     = []Step{StepDeclareTemp, StepDivert, StepMoveAside, StepDelete, StepRedeclare, StepUndivert, StepMoveBack, StepDeleteTemp}
	absentSteps  = []Step{StepDeclareTemp, StepDivert, StepRedeclare, StepUndivert, StepMoveBack, StepDeleteTemp}
	newSteps     = []Step{StepDeclareTemp, StepUndivert, StepMoveBack, StepDeleteTemp}
	undivertedSt = []Step{StepDeclareTemp, stepUndiverted, StepMoveBack, StepDeleteTemp}
)

// TestPlanResumeMatrix is the resume matrix (see plan): every state of q,
// the temporary queue and the divert queue, what Migrate reports finding
// and the steps that remain.
func TestPlanResumeMatrix(t *testing.T) {
	t.Parallel()
	cases := []struct {
		leftBy string
		o      observed
		found  State
		steps  []Step
	}{
		{"no queue yet", observed{queueAbsent, false, false}, StateCreated, []Step{stepCreate}},
		{"no queue, a stray divert queue", observed{queueAbsent, false, true}, StateCreated, []Step{stepDropStrayDivert, stepCreate}},
		{"a finished migration (kill after delete-temp)", observed{queueTarget, false, false}, StateDone, nil},
		{"a stray divert queue", observed{queueTarget, false, true}, StateDone, []Step{stepDropStrayDivert}},
		{"old arguments", observed{queueOther, false, false}, StateFresh, allSteps},
		{"old arguments, a stray divert queue", observed{queueOther, false, true}, StateFresh, append([]Step{stepDropStrayDivert}, allSteps...)},
		{"kill after declare-temp", observed{queueOther, true, false}, StateResumedOld, allSteps},
		{"kill after divert or move-aside, or inside move-aside", observed{queueOther, true, true}, StateResumedOld, allSteps},
		{"kill after delete, the divert queue deleted by hand", observed{queueAbsent, true, false}, StateResumedAbsent, absentSteps},
		{"kill after delete", observed{queueAbsent, true, true}, StateResumedAbsent, absentSteps},
		{"kill after redeclare", observed{queueTarget, true, true}, StateResumedNew, newSteps},
		{"kill after undivert or move-back, or inside move-back", observed{queueTarget, true, false}, StateResumedNew, undivertedSt},
	}
	seen := map[observed]bool{}
	for _, c := range cases {
		seen[c.o] = true
		found, steps := plan(c.o)
		if found != c.found || !slices.Equal(steps, c.steps) {
			t.Errorf("%s %+v: plan = %s %v, want %s %v", c.leftBy, c.o, found, steps, c.found, c.steps)
		}
	}
	for _, o := range everyState() {
		if !seen[o] {
			t.Errorf("the matrix lacks the state %+v", o)
		}
	}
}

func everyState() []observed {
	var out []observed
	for _, q := range []queueState{queueAbsent, queueOther, queueTarget} {
		for _, temp := range []bool{false, true} {
			for _, div := range []bool{false, true} {
				out = append(out, observed{q, temp, div})
			}
		}
	}
	return out
}

// world is a broker as the steps see it, with where the messages are.
type world struct {
	observed
	inQueue, inTemp bool
}

// rules run a step on a world as the broker would, failing when the step
// breaks the migration's rules: no queue deleted with messages in it, q
// deleted only while producers are diverted, producers diverted only into a
// temporary queue that exists and sent back only to q with the target
// arguments, the temporary queue deleted only once they are sent back.
var rules = map[Step]func(w *world) error{
	stepCreate: func(w *world) error {
		if w.queue != queueAbsent {
			return fmt.Errorf("create with q %v", w.queue)
		}
		w.queue = queueTarget
		return nil
	},
	stepDropStrayDivert: func(w *world) error {
		if w.temp {
			return fmt.Errorf("drop-stray-divert with a temporary queue")
		}
		w.divert = false
		return nil
	},
	StepDeclareTemp: func(w *world) error { w.temp = true; return nil },
	StepDivert: func(w *world) error {
		if !w.temp {
			return fmt.Errorf("divert into a temporary queue that does not exist")
		}
		w.divert = true
		return nil
	},
	StepMoveAside: func(w *world) error {
		if !w.temp || w.queue == queueAbsent {
			return fmt.Errorf("move-aside with temp %v, q %v", w.temp, w.queue)
		}
		w.inTemp, w.inQueue = w.inTemp || w.inQueue, false
		return nil
	},
	StepDelete: func(w *world) error {
		if !w.divert || w.inQueue {
			return fmt.Errorf("delete with divert %v, messages in q %v", w.divert, w.inQueue)
		}
		w.queue = queueAbsent
		return nil
	},
	StepRedeclare: func(w *world) error {
		if w.queue != queueAbsent {
			return fmt.Errorf("redeclare with q %v", w.queue)
		}
		w.queue = queueTarget
		return nil
	},
	StepUndivert: func(w *world) error {
		if w.queue != queueTarget {
			return fmt.Errorf("undivert with q %v", w.queue)
		}
		w.divert = false
		return nil
	},
	stepUndiverted: func(w *world) error {
		if w.divert {
			return fmt.Errorf("found-undiverted with a divert queue")
		}
		return nil
	},
	StepMoveBack: func(w *world) error {
		if !w.temp || w.queue != queueTarget {
			return fmt.Errorf("move-back with temp %v, q %v", w.temp, w.queue)
		}
		w.inQueue, w.inTemp = w.inQueue || w.inTemp, false
		return nil
	},
	StepDeleteTemp: func(w *world) error {
		if w.divert || w.inTemp {
			return fmt.Errorf("delete-temp with divert %v, messages in temp %v", w.divert, w.inTemp)
		}
		w.temp = false
		return nil
	},
}

// apply runs step s on w by its rule.
func (w *world) apply(s Step) error {
	rule, ok := rules[s]
	if !ok {
		return fmt.Errorf("unknown step %s", s)
	}
	return rule(w)
}

// finish plans from w and runs the plan, checking the rules and that it ends
// with q migrated, holding every message, and nothing else left.
func finish(t *testing.T, name string, w world) {
	t.Helper()
	had := w.inQueue || w.inTemp
	found, steps := plan(w.observed)
	for i, s := range steps {
		// execute sends a delete back to the step before it.
		if (s == StepDelete && (i == 0 || steps[i-1] != StepMoveAside)) || (s == StepDeleteTemp && (i == 0 || steps[i-1] != StepMoveBack)) {
			t.Errorf("%s: plan %s %v has %s without its move right before it", name, found, steps, s)
		}
		if err := w.apply(s); err != nil {
			t.Errorf("%s: plan %s %v, step %d: %v", name, found, steps, i, err)
			return
		}
	}
	if w.observed != (observed{queueTarget, false, false}) || w.inQueue != had || w.inTemp {
		t.Errorf("%s: plan %s %v ends with %+v", name, found, steps, w)
	}
}

// TestPlanFinishesFromEveryState runs the plan of every state, and of every
// state a fresh migration killed after any step, or inside a move, leaves,
// on a model of the broker: each keeps the rules and ends migrated.
func TestPlanFinishesFromEveryState(t *testing.T) {
	t.Parallel()
	for _, o := range everyState() {
		// Messages wait wherever a queue exists to hold them.
		finish(t, fmt.Sprintf("from %+v", o), world{o, o.queue != queueAbsent, o.temp})
	}
	_, fresh := plan(observed{queueOther, false, false})
	for k := range len(fresh) + 1 {
		w := world{observed{queueOther, false, false}, true, false}
		for _, s := range fresh[:k] {
			if err := w.apply(s); err != nil {
				t.Fatalf("the fresh plan, step %s: %v", s, err)
			}
		}
		finish(t, fmt.Sprintf("killed after %v", fresh[:k]), w)
		if k < len(fresh) && (fresh[k] == StepMoveAside || fresh[k] == StepMoveBack) {
			// Killed inside the move: some messages moved, some not.
			w.inQueue, w.inTemp = true, true
			finish(t, fmt.Sprintf("killed inside %s after %v", fresh[k], fresh[:k]), w)
		}
	}
}

// TestExecuteSendsBackAndHooks pins how execute runs a plan whose steps send
// it back: a delete refused once after the grace wait (again, twice), a
// redeclaration that finds q declared again with its old arguments
// (replaceAgain), a temporary queue that was not empty once. The repeated
// move runs without its hook; after replaceAgain, move-aside and delete run
// as steps, hooks included.
func TestExecuteSendsBackAndHooks(t *testing.T) {
	t.Parallel()
	var ran, hooked []Step
	script := map[Step][]next{
		StepDelete:     {again, again, proceed, proceed},
		StepRedeclare:  {replaceAgain, proceed},
		StepDeleteTemp: {again, proceed},
	}
	do := func(s Step) (next, error) {
		ran = append(ran, s)
		if outs := script[s]; len(outs) > 0 {
			script[s] = outs[1:]
			return outs[0], nil
		}
		return proceed, nil
	}
	hook := func(s Step) error { hooked = append(hooked, s); return nil }
	if err := execute(slices.Clone(allSteps), do, hook); err != nil {
		t.Fatal(err)
	}
	wantRan := []Step{StepDeclareTemp, StepDivert,
		StepMoveAside, StepDelete, StepMoveAside, StepDelete, StepMoveAside, StepDelete,
		StepRedeclare, StepMoveAside, StepDelete, StepRedeclare,
		StepUndivert, StepMoveBack, StepDeleteTemp, StepMoveBack, StepDeleteTemp}
	wantHooked := []Step{StepDeclareTemp, StepDivert, StepMoveAside, StepDelete,
		StepMoveAside, StepDelete, StepRedeclare, StepUndivert, StepMoveBack, StepDeleteTemp}
	if !slices.Equal(ran, wantRan) {
		t.Errorf("ran\n %v\nwant\n %v", ran, wantRan)
	}
	if !slices.Equal(hooked, wantHooked) {
		t.Errorf("hooked\n %v\nwant\n %v", hooked, wantHooked)
	}

	// A hook's error stops the plan there.
	ran = nil
	stop := fmt.Errorf("stop")
	err := execute(slices.Clone(allSteps), do, func(s Step) error {
		if s == StepDelete {
			return stop
		}
		return nil
	})
	if err != stop || ran[len(ran)-1] != StepDelete {
		t.Errorf("execute with a hook failing after delete = %v, ran %v", err, ran)
	}
}
