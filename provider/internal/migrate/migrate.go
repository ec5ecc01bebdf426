// Package migrate changes the arguments of a live RabbitMQ queue without
// losing a message. RabbitMQ cannot change a queue's arguments in place, so a
// migration moves the queue's messages aside into a temporary queue, deletes
// the queue once it is empty, declares it again with the new arguments and
// moves the messages back:
//
//	declare-temp  declare q.migrating (topology.MigrationName), durable, no arguments
//	divert        declare q.migrating.divert (topology.DivertName): queuey
//	              producers publish into q.migrating from now on
//	move-aside    move every message of q into q.migrating
//	delete        delete q, only if it is empty (if-empty), and no sooner
//	              than divert.Grace after divert; new work that
//	              arrived meanwhile is moved aside and the delete tried again
//	redeclare     declare q with the new arguments
//	undivert      delete q.migrating.divert: producers publish into q again
//	move-back     move every message of q.migrating into q
//	delete-temp   delete q.migrating, only if it is empty, and no sooner than
//	              divert.Grace after undivert
//
// Every move publishes each message to the default exchange, mandatory, with
// all its properties and headers, waits for the publisher confirm, and only
// then acknowledges the original. A crash between any two steps, or inside a
// move, loses nothing: the temporary queue has a fixed name, and Migrate
// called again recognises the state it finds (q with the old arguments, q
// absent, q with the new arguments) and finishes the migration. A crash
// inside a move can leave a message in both queues, which at-least-once
// delivery allows; it never leaves it in neither.
//
// Why divert: a publish that reaches q while the broker deletes it is lost
// with a positive confirm. RabbitMQ (3.10.8, checked) settles a message
// routed to a queue whose deletion is under way as if the queue were already
// gone, without a return, and no client can detect it. The divert queue is
// the protocol (see topology.DivertName) by which queuey producers stop
// publishing to q before it is deleted: the migration waits
// divert.Grace before each deletion, and a producer counts a publish
// as done only if its confirm arrived within DivertGrace of the probe of the
// divert queue it was routed by (else it sends it again), so that no queuey
// producer's job is lost to a queue while it is deleted. Publishers that do
// not follow the protocol (raw AMQP clients) still race the deletion, and
// can lose one message per publish in flight at that instant: pause them
// (see the priority-migrations guide).
//
// q does not exist between delete and redeclare (Result.Absent). A message
// that a hold queue dead-letters into q in that window is dropped by the
// broker: dead-lettering to a queue that does not exist discards the message.
//
// The package does no management API calls: everything it needs is
// observable over AMQP, and exact where the management API's counts lag.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/divert"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// Step names one step of a migration, as passed to Options.AfterStep.
type Step string

// The steps of a migration, in order. StepMoveAside and StepDelete repeat
// when new work arrives before the delete, and the three steps from
// StepMoveAside repeat when something else declares q again while it is
// absent.
const (
	StepDeclareTemp Step = "declare-temp"
	StepDivert      Step = "divert"
	StepMoveAside   Step = "move-aside"
	StepDelete      Step = "delete"
	StepRedeclare   Step = "redeclare"
	StepUndivert    Step = "undivert"
	StepMoveBack    Step = "move-back"
	StepDeleteTemp  Step = "delete-temp"
)

// Steps lists every step in order.
var Steps = []Step{StepDeclareTemp, StepDivert, StepMoveAside, StepDelete, StepRedeclare, StepUndivert, StepMoveBack, StepDeleteTemp}

// Defaults of Options.
const (
	DefaultBatch     = 256
	DefaultMaxRounds = 100
)

// Options tune a migration. The zero value, like nil, means every default.
type Options struct {
	// AfterStep, when set, runs after every completed step. An error it
	// returns stops the migration there and is returned, wrapped: tests use
	// it to kill a migration between any two steps.
	AfterStep func(Step) error
	// Batch is how many messages a move takes before it waits for their
	// confirms and acknowledges them. Defaults to DefaultBatch.
	Batch int
	// MaxRounds bounds how often the queue is moved aside again because new
	// work arrived before the delete, or because something declared it
	// again with its old arguments while it was absent. Defaults to
	// DefaultMaxRounds.
	MaxRounds int
	// Grace is how long the migration waits after declaring the divert
	// queue before it deletes q, and after deleting the divert queue before
	// it deletes the temporary queue, so that every queuey producer's
	// publish to the queue it deletes either arrived before or is sent
	// again (see topology.DivertName).
	// Defaults to divert.Grace; shorter is safe only when no queuey
	// producer publishes to q during the migration.
	Grace time.Duration

	// beforeAck, for tests, runs in a move after a batch is confirmed and
	// before its originals are acknowledged; an error stops the move there,
	// as a crash would.
	beforeAck func(from string, batch int) error
}

func (o *Options) resolved() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Batch <= 0 {
		r.Batch = DefaultBatch
	}
	if r.MaxRounds <= 0 {
		r.MaxRounds = DefaultMaxRounds
	}
	if r.Grace <= 0 {
		r.Grace = divert.Grace
	}
	return r
}

// State is what Migrate found when it started.
type State string

const (
	// StateFresh: q had other arguments and there was no temporary queue.
	StateFresh State = "fresh"
	// StateResumedOld: a temporary queue was left behind and q still had
	// its old arguments (a migration died before the delete).
	StateResumedOld State = "resumed-old-arguments"
	// StateResumedAbsent: a temporary queue was left behind and q did not
	// exist (a migration died between delete and redeclare).
	StateResumedAbsent State = "resumed-absent"
	// StateResumedNew: a temporary queue was left behind and q already had
	// the new arguments (a migration died while moving back).
	StateResumedNew State = "resumed-new-arguments"
	// StateDone: q already had the new arguments and there was no temporary
	// queue; nothing was moved.
	StateDone State = "already-migrated"
	// StateCreated: neither q nor a temporary queue existed; q was declared
	// with the new arguments.
	StateCreated State = "created"
)

// Result says what a migration did.
type Result struct {
	// Queue is the migrated queue and Temp its temporary queue.
	Queue, Temp string
	// Found is the state Migrate started from.
	Found State
	// MovedAside and MovedBack count the messages moved each way,
	// including any moved again after a crash.
	MovedAside, MovedBack int
	// DeleteAttempts counts deletions of q tried; more than one means new
	// work arrived between the move and the delete.
	DeleteAttempts int
	// Redeclared counts how often q was found declared again with its old
	// arguments while it was meant to be absent, and moved aside again.
	Redeclared int
	// Absent is how long q did not exist: from its successful deletion to
	// its successful declaration with the new arguments, summed over
	// rounds. When a resumed migration found q absent, it counts from the
	// start of this call. Zero when q was not absent during this call.
	Absent time.Duration
	// DeletedAt is when q was last deleted, zero if never.
	DeletedAt time.Time
	// Diverted is how long this call kept queuey producers publishing into
	// the temporary queue: from the divert queue's declaration to its
	// deletion. Jobs they published meanwhile wait there until move-back.
	Diverted time.Duration
	// UserIDsDropped counts the messages moved without their user_id
	// property because it named another user than the migration's:
	// RabbitMQ refuses a publish whose user_id is not the publishing
	// connection's user (unless that user has the impersonator tag), and
	// one such message would otherwise stop every migration of the queue.
	UserIDsDropped int
	// Took is the whole migration.
	Took time.Duration
}

// ErrNotEmpty is returned when q kept receiving work faster than it could
// be moved aside, MaxRounds times in a row.
var ErrNotEmpty = errors.New("the queue kept receiving messages between moving them aside and deleting it")

// Dial connects to the broker at amqpURL, in virtual host vhost (which
// overrides any in the URL). cfg may be nil; its Vhost is ignored.
func Dial(amqpURL, vhost string, cfg *amqp.Config) (*amqp.Connection, error) {
	var c amqp.Config
	if cfg != nil {
		c = *cfg
	}
	c.Vhost = vhost
	if c.Properties == nil {
		c.Properties = amqp.Table{}
	}
	if _, ok := c.Properties["connection_name"]; !ok {
		c.Properties["connection_name"] = "queuey migration"
	}
	ac, err := amqp.DialConfig(amqpURL, c)
	if err != nil {
		return nil, fmt.Errorf("connect to RabbitMQ over AMQP (virtual host %q): %w", vhost, err)
	}
	return ac, nil
}

// Migrate makes queue a classic queue declared with args and durable,
// keeping every message it holds; see the package comment. It is also the
// way to resume a migration that died: called again with the same target, it
// finishes it. Migrate on a queue that already has the target arguments and
// no temporary queue does nothing (StateDone).
//
// ac is the caller's connection, in the queue's virtual host; Migrate opens
// and closes channels on it and leaves it open. Queue arguments follow the
// runtime's: integers as int64 (topology.WorkArgs).
func Migrate(ctx context.Context, ac *amqp.Connection, queue string, args map[string]any, durable bool, opts *Options) (Result, error) {
	o := opts.resolved()
	m := &migration{ctx: ctx, ac: ac, user: userOf(ac), queue: queue, temp: topology.MigrationName(queue), divert: topology.DivertName(queue), args: args, durable: durable, opts: o}
	start := time.Now()
	m.res.Queue, m.res.Temp = m.queue, m.temp
	err := m.run()
	m.close()
	m.res.Took = time.Since(start)
	if err != nil {
		return m.res, fmt.Errorf("migrate queue %q (its messages are kept, in %q where they were moved aside; applying again resumes): %w", queue, m.temp, err)
	}
	return m.res, nil
}

// MigrateURL is Migrate over a connection of its own to amqpURL in virtual
// host vhost (see Dial), closed when it returns.
func MigrateURL(ctx context.Context, amqpURL, vhost string, cfg *amqp.Config, queue string, args map[string]any, durable bool, opts *Options) (Result, error) {
	ac, err := Dial(amqpURL, vhost, cfg)
	if err != nil {
		return Result{Queue: queue, Temp: topology.MigrationName(queue)}, err
	}
	defer func() { _ = ac.Close() }()
	return Migrate(ctx, ac, queue, args, durable, opts)
}

// Pending reports whether queue has a temporary queue left behind by a
// migration that did not finish, and how many messages wait in it.
func Pending(ctx context.Context, ac *amqp.Connection, queue string) (bool, int, error) {
	m := &migration{ctx: ctx, ac: ac, queue: queue, temp: topology.MigrationName(queue)}
	defer m.close()
	return m.exists(m.temp)
}

type migration struct {
	ctx context.Context
	ac  *amqp.Connection
	// user is the user ac authenticated as, "" when it is not known
	// (EXTERNAL authentication: a client certificate).
	user    string
	queue   string
	temp    string
	divert  string
	args    map[string]any
	durable bool
	opts    Options
	res     Result
	ctl     *amqp.Channel // see control

	// divertedAt is when this call's declaration of the divert queue
	// returned, zero before; undivertedAt when its deletion returned, or
	// when this call found it absent with a migration to finish. Each is
	// no earlier than the broker's change, so waiting Grace from them is
	// waiting at least that long from the change.
	divertedAt, undivertedAt time.Time
}

func (m *migration) step(s Step) error {
	if m.opts.AfterStep == nil {
		return nil
	}
	if err := m.opts.AfterStep(s); err != nil {
		return fmt.Errorf("stopped after step %s: %w", s, err)
	}
	return nil
}

func (m *migration) run() error {
	tempExists, _, err := m.exists(m.temp)
	if err != nil {
		return err
	}
	queueExists, _, err := m.exists(m.queue)
	if err != nil {
		return err
	}
	divertExists, _, err := m.exists(m.divert)
	if err != nil {
		return err
	}
	if divertExists && !tempExists {
		// A divert queue without its temporary queue: the temporary
		// queue was deleted by hand, and producers that find the divert
		// queue fall back to q when their publish into it is returned.
		// Nothing waits in a temporary queue to be moved back.
		if err := m.undivert(); err != nil {
			return err
		}
	}
	// Declaring q with the target arguments tells its state apart: it
	// succeeds when q has them (or is absent, and then creates it), and is
	// refused with PRECONDITION_FAILED when q has others.
	matches := false
	if queueExists {
		matches, err = m.declareTarget()
		if err != nil {
			return err
		}
	}
	switch {
	case !tempExists && !queueExists:
		m.res.Found = StateCreated
		if _, err := m.declareTarget(); err != nil {
			return err
		}
		return nil
	case !tempExists && matches:
		m.res.Found = StateDone
		return nil
	case !tempExists:
		m.res.Found = StateFresh
	case !queueExists:
		m.res.Found = StateResumedAbsent
	case matches:
		m.res.Found = StateResumedNew
	default:
		m.res.Found = StateResumedOld
	}

	if err := m.declare(m.temp, true, topology.MigrationArgs()); err != nil {
		return err
	}
	if err := m.step(StepDeclareTemp); err != nil {
		return err
	}

	if m.res.Found == StateFresh || m.res.Found == StateResumedOld || m.res.Found == StateResumedAbsent {
		if err := m.declare(m.divert, topology.DivertDurable, topology.DivertArgs()); err != nil {
			return err
		}
		m.divertedAt = time.Now()
		if err := m.step(StepDivert); err != nil {
			return err
		}
		if err := m.replace(m.res.Found == StateResumedAbsent); err != nil {
			return err
		}
	}
	// q has the new arguments: send producers back to it. A resumed
	// migration that finds no divert queue counts from now: every probe
	// that found it was sent before this call, and a publish it routed
	// counts only if confirmed within DivertGrace of that sending.
	if divertExists || !m.divertedAt.IsZero() {
		if err := m.undivert(); err != nil {
			return err
		}
		if err := m.step(StepUndivert); err != nil {
			return err
		}
	} else {
		m.undivertedAt = time.Now()
	}

	n, err := m.move(m.temp, m.queue)
	m.res.MovedBack += n
	if err != nil {
		return fmt.Errorf("move messages back from %q: %w", m.temp, err)
	}
	if err := m.step(StepMoveBack); err != nil {
		return err
	}
	for round := 0; ; round++ {
		// Producers may still publish into the temporary queue until
		// the grace after undivert has passed: move that back too.
		if err := divert.Wait(m.ctx, m.undivertedAt, m.opts.Grace); err != nil {
			return err
		}
		err := m.delete(m.temp)
		if err == nil {
			break
		}
		if !isNotEmpty(err) || round >= m.opts.MaxRounds {
			return fmt.Errorf("delete %q: %w", m.temp, err)
		}
		// Something published into the temporary queue: move it back too.
		n, err := m.move(m.temp, m.queue)
		m.res.MovedBack += n
		if err != nil {
			return fmt.Errorf("move messages back from %q: %w", m.temp, err)
		}
	}
	return m.step(StepDeleteTemp)
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

// replace moves q's messages aside, deletes q and declares it with the target
// arguments. absent says q is already gone (a resumed migration).
func (m *migration) replace(absent bool) error {
	var deletedAt time.Time
	if absent {
		deletedAt = time.Now()
	}
	for round := 0; ; round++ {
		if deletedAt.IsZero() {
			if err := m.moveAsideAndDelete(); err != nil {
				return err
			}
			deletedAt = time.Now()
			m.res.DeletedAt = deletedAt
		}
		matches, err := m.declareTarget()
		if err != nil {
			return err
		}
		if matches {
			m.res.Absent += time.Since(deletedAt)
			break
		}
		// Someone declared q again, with its old arguments, while it was
		// absent: a process that reconnected with an old configuration.
		// Whatever it holds is moved aside like the rest.
		m.res.Absent += time.Since(deletedAt)
		deletedAt = time.Time{}
		m.res.Redeclared++
		if round >= m.opts.MaxRounds {
			return fmt.Errorf("queue %q was declared again with other arguments %d times while it was being replaced; stop the processes that declare it with the old configuration", m.queue, round+1)
		}
	}
	return m.step(StepRedeclare)
}

// moveAsideAndDelete moves every message of q into the temporary queue and
// deletes q, moving again as long as new work beats the delete.
func (m *migration) moveAsideAndDelete() error {
	for round := 0; ; round++ {
		// Bounded by what q holds now, so that producers publishing
		// faster than the move cannot keep it going forever: the delete
		// then fails, and the rounds are bounded.
		_, ready, err := m.exists(m.queue)
		if err != nil {
			return err
		}
		n, err := m.moveAtMost(m.queue, m.temp, ready+m.opts.Batch)
		m.res.MovedAside += n
		if err != nil {
			return fmt.Errorf("move messages aside into %q: %w", m.temp, err)
		}
		if round == 0 {
			if err := m.step(StepMoveAside); err != nil {
				return err
			}
		}
		if left := time.Until(m.divertedAt.Add(m.opts.Grace)); left > 0 {
			// Producers that probed before the divert queue existed
			// may still publish to q: wait them out, then move what
			// they published.
			if err := divert.Wait(m.ctx, m.divertedAt, m.opts.Grace); err != nil {
				return err
			}
			continue
		}
		m.res.DeleteAttempts++
		err = m.delete(m.queue)
		if err == nil {
			return m.step(StepDelete)
		}
		if !isNotEmpty(err) {
			return fmt.Errorf("delete %q: %w", m.queue, err)
		}
		if round >= m.opts.MaxRounds {
			return fmt.Errorf("delete %q after %d moves: %w", m.queue, round+1, ErrNotEmpty)
		}
	}
}

// channel opens a channel for one operation. A refused declaration or
// deletion closes its channel, so none is shared across them.
func (m *migration) channel() (*amqp.Channel, error) {
	ch, err := m.ac.Channel()
	if err != nil {
		return nil, fmt.Errorf("open a channel: %w", err)
	}
	return ch, nil
}

// control returns the channel for declarations and deletions, opening one
// when there is none. A refused declaration or deletion closes its channel,
// so every failed operation drops it (done) and the next opens another;
// keeping it across successes saves a round trip between the deletion of q
// and its redeclaration.
func (m *migration) control() (*amqp.Channel, error) {
	if err := m.ctx.Err(); err != nil {
		return nil, err
	}
	if m.ctl != nil && !m.ctl.IsClosed() {
		return m.ctl, nil
	}
	ch, err := m.channel()
	if err != nil {
		return nil, err
	}
	m.ctl = ch
	return ch, nil
}

// done drops the control channel after an operation failed on it.
func (m *migration) done(err error) {
	if err != nil && m.ctl != nil {
		_ = m.ctl.Close()
		m.ctl = nil
	}
}

func (m *migration) close() {
	if m.ctl != nil {
		_ = m.ctl.Close()
		m.ctl = nil
	}
}

// exists reports whether name exists, by a passive declaration, and how many
// ready messages it holds.
func (m *migration) exists(name string) (bool, int, error) {
	ch, err := m.control()
	if err != nil {
		return false, 0, err
	}
	q, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
	m.done(err)
	if err == nil {
		return true, q.Messages, nil
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return false, 0, nil
	}
	return false, 0, fmt.Errorf("check whether queue %q exists: %w", name, err)
}

func (m *migration) declare(name string, durable bool, args map[string]any) error {
	ch, err := m.control()
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclare(name, durable, false, false, false, amqp.Table(args))
	m.done(err)
	if err != nil {
		return fmt.Errorf("declare queue %q: %w", name, err)
	}
	return nil
}

// declareTarget declares q with the target arguments. It reports false,
// without an error, when q exists with other arguments.
func (m *migration) declareTarget() (bool, error) {
	err := m.declare(m.queue, m.durable, m.args)
	if err == nil {
		return true, nil
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		return false, nil
	}
	return false, err
}

// delete deletes name if it is empty.
func (m *migration) delete(name string) error {
	_, err := m.deleteQueue(name, true)
	return err
}

func (m *migration) deleteQueue(name string, ifEmpty bool) (int, error) {
	ch, err := m.control()
	if err != nil {
		return 0, err
	}
	n, err := ch.QueueDelete(name, false, ifEmpty, false)
	m.done(err)
	return n, err
}

// isNotEmpty reports whether err is the broker refusing an if-empty delete.
func isNotEmpty(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed
}

// move moves every ready message of from into to and returns how many it
// moved. Each batch is published with confirms; the originals are
// acknowledged only once every message of the batch is confirmed and none
// was returned. Whatever is not acknowledged when move fails goes back to
// from when its channel closes.
func (m *migration) move(from, to string) (int, error) { return m.moveAtMost(from, to, -1) }

// moveAtMost is move, stopping after about limit messages (a whole batch
// more at most); limit < 0 means no limit.
func (m *migration) moveAtMost(from, to string, limit int) (int, error) {
	src, err := m.channel()
	if err != nil {
		return 0, err
	}
	defer func() { _ = src.Close() }()
	pub, err := m.channel()
	if err != nil {
		return 0, err
	}
	defer func() { _ = pub.Close() }()
	if err := pub.Confirm(false); err != nil {
		return 0, fmt.Errorf("put channel in confirm mode: %w", err)
	}
	returns := pub.NotifyReturn(make(chan amqp.Return, m.opts.Batch))

	moved := 0
	for limit < 0 || moved < limit {
		if err := m.ctx.Err(); err != nil {
			return moved, err
		}
		var batch []amqp.Delivery
		for len(batch) < m.opts.Batch {
			d, ok, err := src.Get(from, false)
			if err != nil {
				return moved, fmt.Errorf("get from %q: %w", from, err)
			}
			if !ok {
				break
			}
			batch = append(batch, d)
		}
		if len(batch) == 0 {
			return moved, nil
		}
		dcs := make([]*amqp.DeferredConfirmation, len(batch))
		for i, d := range batch {
			dc, err := pub.PublishWithDeferredConfirmWithContext(m.ctx, "", to, true, false, m.republishing(d))
			if err != nil {
				return moved, fmt.Errorf("publish to %q: %w", to, err)
			}
			dcs[i] = dc
		}
		for _, dc := range dcs {
			acked, err := dc.WaitContext(m.ctx)
			if err != nil {
				return moved, err
			}
			if !acked {
				return moved, fmt.Errorf("publish to %q: the broker did not confirm a message (nack or closed channel)", to)
			}
		}
		// The broker sends a return before the confirm of the same
		// message, and amqp091-go hands it over before processing the
		// confirm: every return of this batch is already buffered.
		select {
		case r := <-returns:
			return moved, fmt.Errorf("publish to %q: message %q was returned as unroutable (%s): the queue does not exist", to, r.MessageId, r.ReplyText)
		default:
		}
		if m.opts.beforeAck != nil {
			if err := m.opts.beforeAck(from, len(batch)); err != nil {
				return moved, err
			}
		}
		if err := src.Ack(batch[len(batch)-1].DeliveryTag, true); err != nil {
			return moved, fmt.Errorf("acknowledge messages of %q: %w", from, err)
		}
		moved += len(batch)
	}
	return moved, nil
}

// republishing is d as the move publishes it: every property kept
// (divert.Republishing), except a user_id that names another user than the
// migration's, which RabbitMQ would refuse, closing the channel.
func (m *migration) republishing(d amqp.Delivery) amqp.Publishing {
	msg := divert.Republishing(d)
	if msg.UserId != "" && m.user != "" && msg.UserId != m.user {
		msg.UserId = ""
		m.res.UserIDsDropped++
	}
	return msg
}

// userOf is the user ac authenticated as with a username and password, or
// "" when it used another mechanism.
func userOf(ac *amqp.Connection) string {
	for _, a := range ac.Config.SASL {
		switch a := a.(type) {
		case *amqp.PlainAuth:
			return a.Username
		case *amqp.AMQPlainAuth:
			return a.Username
		}
	}
	return ""
}
