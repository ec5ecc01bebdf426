package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/queuey/terraform-provider-queuey/provider/internal/migrate"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// This file is the executing half of Create, Update and Delete: it runs the
// operations changes.go plans, against the management API and, for a
// migration, over AMQP.

// run carries out ops, declareWorkers at a time, and returns each one's
// error, nil for an operation that succeeded.
func (r *queueSetResource) run(ctx context.Context, vhost string, ops []operation) []error {
	tasks := make([]func() error, len(ops))
	for i, op := range ops {
		tasks[i] = func() error {
			for _, s := range op.steps {
				if err := r.runStep(ctx, vhost, s); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return runAll(ctx, declareWorkers, tasks)
}

func (r *queueSetResource) runStep(ctx context.Context, vhost string, s step) error {
	d := s.queue
	switch s.kind {
	case stepDeclare:
		return r.data.broker.declare(vhost, d.Name, d.Durable, d.Args)
	case stepMigrate:
		return r.replaceQueue(ctx, vhost, d)
	case stepDelete:
		if s.ifEmpty && queueTypeOfDeclaration(d) == topology.QuorumQueueType {
			return r.deleteQuorumIfEmpty(ctx, vhost, d)
		}
		return r.data.broker.deleteQueue(vhost, d.Name, s.ifEmpty)
	}
	return fmt.Errorf("unknown step %d on queue %q", s.kind, d.Name)
}

// replaceQueue declares one broker queue again with new arguments without
// losing a message: it moves them aside into the queue's migration queue over
// AMQP, deletes the queue only when it is empty, declares it anew and moves
// them back (see package migrate). Called for a queue whose migration queue
// was left behind by an apply that died, it finishes that migration.
func (r *queueSetResource) replaceQueue(ctx context.Context, vhost string, d topology.Declaration) error {
	ac, err := migrate.Dial(r.data.amqpURL, vhost, r.data.amqpConfig)
	if err != nil {
		return fmt.Errorf("%w: %w", errMigration, err)
	}
	defer func() { _ = ac.Close() }()
	if err := r.data.broker.sameCluster(ac, r.data.amqpURL); err != nil {
		return err
	}
	// How the migration deletes q depends on q's type now, which a
	// change of queue_type makes another than d's.
	existing, _, err := r.data.broker.getQueue(vhost, d.Name)
	if err != nil {
		return fmt.Errorf("%w: read queue %q: %w", errMigration, d.Name, err)
	}
	opts := &migrate.Options{}
	if existing.Type == topology.QuorumQueueType {
		opts.QueueType = topology.QuorumQueueType
	}
	res, err := migrate.Migrate(ctx, ac, d.Name, d.Args, d.Durable, opts)
	if err != nil {
		return fmt.Errorf("%w: %w", errMigration, err)
	}
	tflog.Info(ctx, "queue migrated", map[string]any{
		"queue": d.Name, "found": string(res.Found), "moved_aside": res.MovedAside, "moved_back": res.MovedBack,
		"absent_ms": res.Absent.Milliseconds(), "took_ms": res.Took.Milliseconds(), "user_ids_dropped": res.UserIDsDropped,
	})
	if res.UserIDsDropped > 0 {
		tflog.Warn(ctx, "queue migrated with messages whose user_id named another user than the provider's AMQP user; RabbitMQ refuses to publish those, so they were moved without it", map[string]any{
			"queue": d.Name, "messages": res.UserIDsDropped,
		})
	}
	return nil
}

// queueTypeOfDeclaration is the type d declares: "" for classic.
func queueTypeOfDeclaration(d topology.Declaration) string {
	t, _ := d.Args[topology.ArgQueueType].(string)
	return t
}

// deleteQuorumIfEmpty deletes quorum queue d only when it is empty, over
// AMQP: the management API, like AMQP, refuses an if-empty delete of a
// quorum queue. A queue that holds messages, or received some during the
// delete (put back: see migrate.DeleteIfEmpty), is errNotEmpty.
func (r *queueSetResource) deleteQuorumIfEmpty(ctx context.Context, vhost string, d topology.Declaration) error {
	ac, err := migrate.Dial(r.data.amqpURL, vhost, r.data.amqpConfig)
	if err != nil {
		return fmt.Errorf("delete quorum queue %q, which needs AMQP: %w", d.Name, err)
	}
	defer func() { _ = ac.Close() }()
	if err := r.data.broker.sameCluster(ac, r.data.amqpURL); err != nil {
		return err
	}
	err = migrate.DeleteIfEmpty(ctx, ac, d.Name, d.Durable, d.Args)
	if errors.Is(err, migrate.ErrQueueNotEmpty) {
		return fmt.Errorf("%w: %w", errNotEmpty, err)
	}
	return err
}

// errMigration marks a failed migration, whose messages are safe in one of
// two queues and which the next apply resumes.
var errMigration = errors.New("migration failed")
