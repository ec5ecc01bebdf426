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
// A migration is detect, plan, execute (resume.go, execute.go). Detect reads
// the state the broker is in: whether q exists, and with the target
// arguments or others; whether the temporary queue and the divert queue
// exist. Plan, a pure function of that state, is the steps that remain: the
// resume matrix, one row per state a migration killed after any step can
// leave. Execute runs them; a step either completes or sends the migration
// back to an earlier step (work arrived before a delete; q was declared
// again with its old arguments while it was absent).
//
// Every move publishes each message to the default exchange, mandatory, with
// all its properties and headers, waits for the publisher confirm, and only
// then acknowledges the original. A crash between any two steps, or inside a
// move, loses nothing: the temporary queue has a fixed name, and Migrate
// called again detects the state it left and finishes the migration. A crash
// inside a move can leave a message in both queues, which at-least-once
// delivery allows; it never leaves it in neither.
//
// Why divert: a publish that reaches q while the broker deletes it is lost
// with a positive confirm. RabbitMQ (3.10.8, checked) settles a message
// routed to a queue whose deletion is under way as if the queue were already
// gone, without a return, and no client can detect it. The divert queue is
// the protocol (package internal/divert) by which queuey producers stop
// publishing to q before it is deleted: the migration waits divert.Grace
// before each deletion (divert.Wait), and a producer counts a publish as done
// only if its confirm arrived within divert.Grace of the probe of the divert
// queue it was routed by (divert.Late; else it sends it again), so that no
// queuey producer's job is lost to a queue while it is deleted. Publishers
// that do not follow the protocol (raw AMQP clients) still race the
// deletion, and can lose one message per publish in flight at that instant:
// pause them (see the priority-migrations guide).
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
	"maps"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/amqphosts"
	"github.com/queuey/terraform-provider-queuey/internal/divert"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// Step names one step of a migration, as passed to Options.AfterStep.
type Step string

// The steps of a migration, in order. StepMoveAside and StepDelete repeat
// when the delete comes before divert.Grace has passed since divert, or
// finds new work in q, and StepMoveBack and StepDeleteTemp when new work
// reaches the temporary queue before its deletion; the hook runs once, after
// the repetition that completes. StepMoveAside and StepDelete run again,
// hooks included, when something else declares q again while it is absent,
// before StepRedeclare completes.
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
	// again (see package internal/divert).
	// Defaults to divert.Grace; shorter is safe only when no queuey
	// producer publishes to q during the migration.
	Grace time.Duration
	// QueueType is the type q has when the migration starts:
	// topology.QuorumQueueType, or "" for a classic queue (or for a q that
	// does not exist). RabbitMQ refuses an if-empty delete of a quorum
	// queue, so the migration deletes one another way (deleteQuorum).
	QueueType string

	// beforeAck, for tests, runs in a move after a batch is confirmed and
	// before its originals are acknowledged; an error stops the move there,
	// as a crash would.
	beforeAck func(from string, batch int) error
	// beforeQuorumDelete, for tests, runs in deleteQuorum between the
	// check that the queue is empty and its deletion.
	beforeQuorumDelete func(queue string) error
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
	// start of this call. Zero when this call did not declare q again
	// after an absence (a queue created afresh, StateCreated, counts none).
	Absent time.Duration
	// DeletedAt is when this call last deleted q, zero if it did not.
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
	// Rescued counts the messages that reached a quorum queue while the
	// migration deleted it and that it moved on (into the temporary queue
	// from q, into q from the temporary queue); see deleteQuorum.
	Rescued int
	// Took is the whole migration.
	Took time.Duration
}

// ErrNotEmpty is returned when q kept receiving work faster than it could
// be moved aside, MaxRounds times in a row.
var ErrNotEmpty = errors.New("the queue kept receiving messages between moving them aside and deleting it")

// Dial connects to the broker at amqpURL, in virtual host vhost (which
// overrides any in the URL). amqpURL may list the nodes of a cluster as
// hosts (amqp://user:pass@host1:5672,host2:5672/, package amqphosts): they
// are dialled in order, once each, and the first that answers is used.
// cfg may be nil; its Vhost is ignored.
func Dial(amqpURL, vhost string, cfg *amqp.Config) (*amqp.Connection, error) {
	urls, err := amqphosts.Split(amqpURL)
	if err != nil {
		return nil, fmt.Errorf("connect to RabbitMQ over AMQP (virtual host %q): %w", vhost, err)
	}
	var base amqp.Config
	if cfg != nil {
		base = *cfg
	}
	base.Vhost = vhost
	ac, err := amqphosts.DialInOrder(urls, func(u string) (*amqp.Connection, error) {
		// DialConfig writes to Properties: each dial gets its own copy,
		// and the caller's is left alone.
		c := base
		c.Properties = maps.Clone(base.Properties)
		if c.Properties == nil {
			c.Properties = amqp.Table{}
		}
		if _, ok := c.Properties["connection_name"]; !ok {
			c.Properties["connection_name"] = "queuey migration"
		}
		return amqp.DialConfig(u, c)
	})
	if err != nil {
		return nil, fmt.Errorf("connect to RabbitMQ over AMQP (virtual host %q): %w", vhost, err)
	}
	return ac, nil
}

// Migrate makes queue a queue declared with args and durable (a quorum
// queue when args say so), keeping every message it holds; see the package
// comment. It is also the
// way to resume a migration that died: called again with the same target, it
// finishes it. Migrate on a queue that already has the target arguments and
// no temporary queue does nothing (StateDone).
//
// ac is the caller's connection, in the queue's virtual host; Migrate opens
// and closes channels on it and leaves it open. Queue arguments follow the
// runtime's: integers as int64 (topology.WorkArgs).
func Migrate(ctx context.Context, ac *amqp.Connection, queue string, args map[string]any, durable bool, opts *Options) (Result, error) {
	o := opts.resolved()
	start := time.Now()
	m := &migration{ctx: ctx, ac: ac, user: userOf(ac), queue: queue, temp: topology.MigrationName(queue), divert: topology.DivertName(queue), args: args, durable: durable, opts: o, start: start, qType: o.QueueType}
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
	// qType and tempType are the types of q and of the temporary queue as
	// they exist now ("" for classic), which decide how they are deleted;
	// tempKnown says whether tempType was found out yet.
	qType, tempType string
	tempKnown       bool
	res             Result
	ctl             *amqp.Channel // see control
	// start is when Migrate was called.
	start time.Time

	// divertedAt is when this call's declaration of the divert queue
	// returned, zero before; undivertedAt when its deletion returned, or
	// when this call found it absent with a migration to finish. Each is
	// no earlier than the broker's change, so waiting Grace from them is
	// waiting at least that long from the change.
	divertedAt, undivertedAt time.Time
	// deletedAt is when q was deleted, or the start of this call when it
	// found q absent; zero while q exists.
	deletedAt time.Time
	// asideRounds counts the moves aside since the last redeclaration
	// (bounded by MaxRounds at the delete), replaceRounds the
	// redeclarations that found q with its old arguments, tempRounds the
	// moves back that the temporary queue's deletion asked for.
	asideRounds, replaceRounds, tempRounds int
}

// run is the migration: detect, plan, execute.
func (m *migration) run() error {
	o, err := m.detect()
	if err != nil {
		return err
	}
	found, steps := plan(o)
	m.res.Found = found
	if o.queue == queueAbsent {
		m.deletedAt = m.start
	}
	return execute(steps, m.do, m.step)
}
