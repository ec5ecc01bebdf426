package migrate

// Execute: the steps of a plan, run in order.

import (
	"fmt"
	"slices"
	"time"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// next is how the execution of a step ends.
type next int

const (
	// proceed: the step is done; its hook runs and the plan goes on.
	proceed next = iota
	// again: the step before this one runs again, without its hook, and
	// then this one. A deletion asks for it when its queue was not empty
	// (work arrived after the move), and delete when the grace after
	// divert had not passed yet.
	again
	// replaceAgain: q is moved aside and deleted again, hooks included,
	// before this step runs again. The redeclaration asks for it when
	// something declared q again with its old arguments while it was
	// absent.
	replaceAgain
)

// execute runs steps in order, as plan made them, each by do, and hook after
// each that completes. plan puts move-aside right before every delete and
// move-back right before delete-temp, which again returns to.
func execute(steps []Step, do func(Step) (next, error), hook func(Step) error) error {
	quiet := false // the step runs again, sent back by the next one: no hook
	for i := 0; i < len(steps); {
		n, err := do(steps[i])
		if err != nil {
			return err
		}
		switch n {
		case again:
			i--
			quiet = true
			continue
		case replaceAgain:
			steps = slices.Insert(steps, i, StepMoveAside, StepDelete)
			continue
		}
		if !quiet {
			if err := hook(steps[i]); err != nil {
				return err
			}
		}
		quiet = false
		i++
	}
	return nil
}

// step runs Options.AfterStep after a completed step of Steps.
func (m *migration) step(s Step) error {
	if m.opts.AfterStep == nil || !slices.Contains(Steps, s) {
		return nil
	}
	if err := m.opts.AfterStep(s); err != nil {
		return fmt.Errorf("stopped after step %s: %w", s, err)
	}
	return nil
}

// do runs one step.
func (m *migration) do(s Step) (next, error) {
	switch s {
	case stepDropStrayDivert, StepUndivert:
		return proceed, m.undivert()
	case stepCreate:
		// A q that something declared with other arguments since detect
		// is not reported here: the next plan finds it as drift.
		_, err := m.declareTarget()
		return proceed, err
	case StepDeclareTemp:
		return proceed, m.declareTemp()
	case StepDivert:
		return proceed, m.divertProducers()
	case StepMoveAside:
		return proceed, m.moveAside()
	case StepDelete:
		return m.deleteQueueAside()
	case StepRedeclare:
		return m.redeclare()
	case stepUndiverted:
		m.undivertedAt = time.Now()
		return proceed, nil
	case StepMoveBack:
		return proceed, m.moveBack()
	case StepDeleteTemp:
		return m.deleteTemp()
	}
	return proceed, fmt.Errorf("unknown step %q", s)
}

// divertProducers declares the divert queue: queuey producers publish into
// the temporary queue from now on.
func (m *migration) divertProducers() error {
	if err := m.declare(m.divert, topology.DivertDurable, topology.DivertArgs()); err != nil {
		return err
	}
	m.divertedAt = time.Now()
	return nil
}

// undivert deletes the divert queue, whether or not it exists.
func (m *migration) undivert() error {
	if _, err := m.deleteQueue(m.divert, false); err != nil {
		return fmt.Errorf("delete %q: %w", m.divert, err)
	}
	m.undivertedAt = time.Now()
	if !m.divertedAt.IsZero() {
		m.res.Diverted += m.undivertedAt.Sub(m.divertedAt)
	}
	return nil
}

// moveAside moves the messages of q into the temporary queue, bounded by
// what q holds now, so that producers publishing faster than the move cannot
// keep it going forever: the delete then fails, and the rounds are bounded.
func (m *migration) moveAside() error {
	_, ready, err := m.exists(m.queue)
	if err != nil {
		return err
	}
	n, err := m.moveAtMost(m.queue, m.temp, ready+m.opts.Batch)
	m.res.MovedAside += n
	if err != nil {
		return fmt.Errorf("move messages aside into %q: %w", m.temp, err)
	}
	return nil
}

// deleteQueueAside deletes q once it is empty, no sooner than the grace
// after divert. Before that, producers that probed before the divert queue
// existed may still publish to q: it waits them out, and sends the migration
// back to move what they published. A refused delete (new work) sends it
// back too, MaxRounds times at most.
func (m *migration) deleteQueueAside() (next, error) {
	if time.Until(m.divertedAt.Add(m.opts.Grace)) > 0 {
		if err := divert.Wait(m.ctx, m.divertedAt, m.opts.Grace); err != nil {
			return proceed, err
		}
		m.asideRounds++
		return again, nil
	}
	m.res.DeleteAttempts++
	err := m.delete(m.queue)
	switch {
	case err == nil:
		m.deletedAt = time.Now()
		m.res.DeletedAt = m.deletedAt
		return proceed, nil
	case !isNotEmpty(err):
		return proceed, fmt.Errorf("delete %q: %w", m.queue, err)
	case m.asideRounds >= m.opts.MaxRounds:
		return proceed, fmt.Errorf("delete %q after %d moves: %w", m.queue, m.asideRounds+1, ErrNotEmpty)
	}
	m.asideRounds++
	return again, nil
}

// redeclare declares q with the target arguments. When someone declared q
// again, with its old arguments, while it was absent (a process that
// reconnected with an old configuration), whatever it holds is moved aside
// like the rest and q deleted again, MaxRounds times at most.
func (m *migration) redeclare() (next, error) {
	matches, err := m.declareTarget()
	if err != nil {
		return proceed, err
	}
	m.res.Absent += time.Since(m.deletedAt)
	if matches {
		m.qType = queueTypeOf(m.args)
		return proceed, nil
	}
	// Declared again with its old arguments, of the type it started with.
	m.qType = m.opts.QueueType
	m.deletedAt = time.Time{}
	m.res.Redeclared++
	if m.replaceRounds >= m.opts.MaxRounds {
		return proceed, fmt.Errorf("queue %q was declared again with other arguments %d times while it was being replaced; stop the processes that declare it with the old configuration", m.queue, m.replaceRounds+1)
	}
	m.replaceRounds++
	m.asideRounds = 0
	return replaceAgain, nil
}

// moveBack moves every message of the temporary queue into q.
func (m *migration) moveBack() error {
	n, err := m.move(m.temp, m.queue)
	m.res.MovedBack += n
	if err != nil {
		return fmt.Errorf("move messages back from %q: %w", m.temp, err)
	}
	return nil
}

// deleteTemp deletes the temporary queue once it is empty, no sooner than
// the grace after undivert: producers may publish into it until then. A
// refused delete (something published into it) sends the migration back to
// move that back too, MaxRounds times at most.
func (m *migration) deleteTemp() (next, error) {
	if err := divert.Wait(m.ctx, m.undivertedAt, m.opts.Grace); err != nil {
		return proceed, err
	}
	err := m.delete(m.temp)
	if err == nil {
		return proceed, nil
	}
	if !isNotEmpty(err) || m.tempRounds >= m.opts.MaxRounds {
		return proceed, fmt.Errorf("delete %q: %w", m.temp, err)
	}
	m.tempRounds++
	return again, nil
}
