package migrate

// Detect and plan: the state a migration finds on the broker, and the steps
// that remain from it. plan is pure, so the resume matrix is unit-tested
// without a broker (resume_test.go).

// queueState is what detect found of q.
type queueState int

const (
	queueAbsent queueState = iota // q does not exist
	queueOther                    // q exists with other arguments or durability than the target
	queueTarget                   // q exists with the target arguments and durability
)

// observed is the broker's state of one queue's migration, as detect reads it.
type observed struct {
	queue queueState
	// temp: the temporary queue q.migrating exists, so a migration did not
	// finish and messages may wait in it.
	temp bool
	// divert: the divert queue q.migrating.divert exists, so queuey
	// producers publish into q.migrating instead of q.
	divert bool
}

// The steps a plan takes besides those of Steps. They are not points a
// migration can be killed between, and Options.AfterStep never sees them.
const (
	// stepDropStrayDivert deletes a divert queue found without its
	// temporary queue (deleted by hand): producers that find it publish
	// into a queue that does not exist and fall back to q when that
	// publish is returned, and nothing waits to be moved back.
	stepDropStrayDivert Step = "drop-stray-divert"
	// stepCreate declares q with the target arguments: neither q nor a
	// temporary queue exists, so nothing is moved.
	stepCreate Step = "create"
	// stepUndiverted counts the grace before the temporary queue's
	// deletion from now: a resumed migration found the divert queue gone,
	// so every probe that found it was sent before this call, and a
	// publish it routed counts only if confirmed within divert.Grace of
	// that sending.
	stepUndiverted Step = "found-undiverted"
)

// plan is the steps that remain from o, in order, and the state Migrate
// reports having found. It is the resume matrix; the last column says which
// kill of a fresh migration (AfterStep, or inside a move) leaves the row:
//
//	q       temp  divert  found                   steps                                   left by
//	absent  no    no      created                 create                                  -
//	target  no    no      already-migrated        -                                       after delete-temp
//	other   no    no      fresh                   all eight                               -
//	other   yes   either  resumed-old-arguments   all eight                               after declare-temp, divert, move-aside; inside move-aside
//	absent  yes   either  resumed-absent          declare-temp divert redeclare undivert  after delete
//	                                              move-back delete-temp
//	target  yes   yes     resumed-new-arguments   declare-temp undivert move-back         after redeclare
//	                                              delete-temp
//	target  yes   no      resumed-new-arguments   declare-temp found-undiverted           after undivert, move-back; inside move-back
//	                                              move-back delete-temp
//
// A divert queue without its temporary queue (temp no, divert yes) is
// dropped first (drop-stray-divert), and the plan goes on as from the row
// with divert no. Every step is safe to run again: a declaration of what
// exists with the same arguments, or a deletion of what is gone, changes
// nothing, so a plan may start by redoing the step it was killed after.
func plan(o observed) (State, []Step) {
	all := []Step{StepDeclareTemp, StepDivert, StepMoveAside, StepDelete, StepRedeclare, StepUndivert, StepMoveBack, StepDeleteTemp}
	var first []Step
	if o.divert && !o.temp {
		first = []Step{stepDropStrayDivert}
	}
	switch {
	case !o.temp && o.queue == queueAbsent:
		return StateCreated, append(first, stepCreate)
	case !o.temp && o.queue == queueTarget:
		return StateDone, first
	case !o.temp:
		return StateFresh, append(first, all...)
	case o.queue == queueOther:
		return StateResumedOld, all
	case o.queue == queueAbsent:
		return StateResumedAbsent, []Step{StepDeclareTemp, StepDivert, StepRedeclare, StepUndivert, StepMoveBack, StepDeleteTemp}
	case o.divert:
		return StateResumedNew, []Step{StepDeclareTemp, StepUndivert, StepMoveBack, StepDeleteTemp}
	default:
		return StateResumedNew, []Step{StepDeclareTemp, stepUndiverted, StepMoveBack, StepDeleteTemp}
	}
}

// detect reads the migration's state from the broker. Whether q has the
// target arguments is found by declaring it with them, only when it exists
// (so that detecting creates nothing): the declaration succeeds when q has
// them, and is refused with PRECONDITION_FAILED when it has others.
func (m *migration) detect() (observed, error) {
	var o observed
	var err error
	if o.temp, _, err = m.exists(m.temp); err != nil {
		return o, err
	}
	queueExists, _, err := m.exists(m.queue)
	if err != nil {
		return o, err
	}
	if o.divert, _, err = m.exists(m.divert); err != nil {
		return o, err
	}
	if queueExists {
		matches, err := m.declareTarget()
		if err != nil {
			return o, err
		}
		o.queue = queueOther
		if matches {
			o.queue = queueTarget
		}
	}
	return o, nil
}
