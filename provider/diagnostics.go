package provider

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"

	"github.com/queuey/terraform-provider-queuey/provider/internal/migrate"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// This file holds the resource's diagnostics: a Title Case summary, a detail
// that says what was attempted and what to do, then the original error.

// configured reports whether the provider handed over a broker, and says
// what to do when it did not.
func (r *queueSetResource) configured(diags *diag.Diagnostics) bool {
	if r.data != nil {
		return true
	}
	diags.AddError("Provider Not Configured",
		"The queuey provider has no broker to talk to yet, because its settings depend on values not known until apply. "+
			"Set endpoint, username and password to known values, or apply the resources they depend on first.")
	return false
}

func (r *queueSetResource) listError(diags *diag.Diagnostics, summary, vhost string, err error) {
	if errors.Is(err, errVhostNotFound) {
		diags.AddAttributeError(path.Root("vhost"), "Virtual Host Not Found",
			fmt.Sprintf("RabbitMQ at %s has no virtual host %q. Create it first (rabbitmqctl add_vhost), or set vhost to one that exists.", r.data.broker.endpoint, vhost))
		return
	}
	s, d := r.data.broker.brokerDiagnostic(summary, fmt.Sprintf("list the queues of virtual host %q", vhost), err)
	diags.AddError(s, d)
}

// declareErrors reports the errors of ops (errs[i] is ops[i]'s), each at its
// logical queue.
func (r *queueSetResource) declareErrors(diags *diag.Diagnostics, summary, vhost, prefix string, ops []operation, errs []error) {
	for i, err := range errs {
		if err != nil {
			r.declareError(diags, summary, vhost, prefix, ops[i].queue, err)
		}
	}
}

func (r *queueSetResource) declareError(diags *diag.Diagnostics, summary, vhost, prefix, name string, err error) {
	at := path.Root("queues").AtMapKey(name)
	switch {
	case errors.Is(err, errMigration):
		diags.AddAttributeError(at, "Queue Migration Error",
			fmt.Sprintf("Migrating a queue of %q in virtual host %q to its new arguments stopped. No message was discarded: they are in the queue or in its migration queue (ending in %q), "+
				"and the next apply resumes the migration. Check that the broker answers over AMQP at the provider's amqp_url (or QUEUEY_AMQP_URL), then apply again.\n\n%s",
				name, vhost, topology.MigrationSuffix, err))
	case errors.Is(err, errInequivalent):
		diags.AddAttributeError(at, "Queue Already Exists With Other Arguments",
			fmt.Sprintf("A queue of %q already exists in virtual host %q with other arguments or durability than the configuration asks for. "+
				"To take it over, import the set with terraform import <address> %q and let the plan show the change; or change the configuration to match.\n\n%s",
				name, vhost, formatID(vhost, prefix), err))
	case errors.Is(err, errNotEmpty):
		diags.AddAttributeError(at, "Queue Holds Messages",
			fmt.Sprintf("RabbitMQ refused to delete a queue of %q in virtual host %q because it holds messages (its count had not reached the management API yet). "+
				"Drain it first, or set force_destroy = true to discard them.\n\n%s", name, vhost, err))
	default:
		s, d := r.data.broker.brokerDiagnostic(summary, fmt.Sprintf("change the queues of %q in virtual host %q", name, vhost), err)
		diags.AddAttributeError(at, s, d)
	}
}

// conflictError is Create's refusal of a queue that exists with other
// arguments, before it declares anything.
func conflictError(vhost, prefix, name string, d topology.Declaration, q brokerQueue) diag.Diagnostic {
	return diag.NewAttributeErrorDiagnostic(path.Root("queues").AtMapKey(name), "Queue Already Exists With Other Arguments",
		fmt.Sprintf("Queue %q already exists in virtual host %q with %s (durable %t), and the configuration asks for %s (durable %t). "+
			"RabbitMQ cannot change a queue's arguments in place. To take the existing queues over, import the set with "+
			"terraform import <address> %q and let the plan show the change; or change the configuration to match. Nothing was declared.",
			d.Name, vhost, migrate.FormatArgs(q.Arguments), q.Durable, migrate.FormatArgs(d.Args), d.Durable, formatID(vhost, prefix)))
}

// removalHoldsMessages is Update's refusal to remove a queue with messages.
func removalHoldsMessages(vhost, name string, held []string) diag.Diagnostic {
	return diag.NewAttributeErrorDiagnostic(path.Root("queues").AtMapKey(name), "Queue Holds Messages",
		fmt.Sprintf("Queue %q was removed from the configuration, but in virtual host %q %s. Deleting it would discard them, so nothing was changed. "+
			"Drain them first, or set force_destroy = true to discard them.", name, vhost, strings.Join(held, ", ")))
}

// setHoldsMessages is Delete's refusal to destroy a set with messages.
func setHoldsMessages(vhost, prefix string, held []string) diag.Diagnostic {
	return diag.NewErrorDiagnostic("Queue Set Holds Messages",
		fmt.Sprintf("The queue set %q in virtual host %q was not destroyed, because %s. Destroying the set would discard those messages. "+
			"Drain them first, or set force_destroy = true and apply before destroying.", prefix, vhost, strings.Join(held, ", ")))
}

// setNotFound is an import's error for a prefix without queues.
func setNotFound(vhost, prefix string) diag.Diagnostic {
	return diag.NewErrorDiagnostic("Queue Set Not Found",
		fmt.Sprintf("Virtual host %q has no queue set with prefix %q: no queue %q whose dead-letter queue %q exists too. "+
			"Check the import id, written <prefix>@<vhost>.", vhost, prefix, topology.WorkName(prefix, "<name>"), topology.DeadName(topology.WorkName(prefix, "<name>"))))
}

// unfinishedMigration is Read's warning about a queue whose migration an
// apply left; where says where its messages are.
func unfinishedMigration(name, where string) diag.Diagnostic {
	if where == "" {
		where = "its migration queue is still there" // its count had not reached the management API
	}
	return diag.NewAttributeWarningDiagnostic(path.Root("queues").AtMapKey(name), "Unfinished Queue Migration",
		fmt.Sprintf("A migration of queue %q to new arguments did not finish: %s. The plan declares the queue again, and the apply finishes the migration, moving every message back.",
			name, where))
}

// differsFromQueuey is Read's warning about what the model cannot show.
func differsFromQueuey(name, problem string) diag.Diagnostic {
	return diag.NewAttributeWarningDiagnostic(path.Root("queues").AtMapKey(name), "Queue Differs From What Queuey Declares",
		problem+". Terraform cannot show this difference in the plan; delete the queue (after draining it) so that the next apply declares it anew.")
}

// replacementWarning is the plan's warning about a queue the apply replaces:
// target is the broker queue, count its messages (-1 when unknown) and
// counted what the count is worth.
func replacementWarning(vhost, name string, target topology.Declaration, reason string, count int, counted string) diag.Diagnostic {
	return diag.NewAttributeWarningDiagnostic(path.Root("queues").AtMapKey(name), "Queue Will Be Replaced",
		fmt.Sprintf("In virtual host %q, %s. It is replaced because RabbitMQ cannot change a queue's arguments in place (%s). %s "+
			"While the queue is replaced, queuey producers publish into the migration queue (their jobs are moved back with the rest), "+
			"and workers resubscribe when the queue is back. An apply that stops halfway is resumed by the next one. "+
			"Two risks remain: a delay, retry or deferral that a hold queue releases in the milliseconds the queue is absent is lost, "+
			"and so is a publish that reaches the queue while RabbitMQ deletes it from a client that does not look for the migration's divert marker "+
			"(a raw AMQP client, a queuey producer from NewUndeclaredProducer or one whose queue set does not list this queue): "+
			"pause such clients for the apply (see the guide on priority migrations).",
			vhost, migrate.Describe(target.Name, count, target.Args, target.Durable), reason, counted))
}

// queueArgumentDiagnostic is the error of a queue's max_priority or
// message_ttl. It points at the queue's entry, queues["orders"], not at the
// attribute inside it: Terraform shows the source line of an attribute path
// only as deep as the map element (the "orders = {" line); a deeper path
// renders at the resource's first line. So the detail names the queue and
// the attribute; what is wrong with the value (it) follows.
func queueArgumentDiagnostic(queue, attribute, it string) diag.Diagnostic {
	summary := "Invalid Max Priority"
	switch attribute {
	case "message_ttl":
		summary = "Invalid Message TTL"
	case "queue_type":
		summary = "Invalid Queue Type"
	}
	return diag.NewAttributeErrorDiagnostic(path.Root("queues").AtMapKey(queue), summary,
		fmt.Sprintf("Queue %q: %s %s.", queue, attribute, strings.TrimSuffix(it, ".")))
}

// topologyDiagnostic points one error of the topology checks at the
// attribute it is about, by the error's type and sentinels.
func topologyDiagnostic(err error) diag.Diagnostic {
	var nameErr *topology.NameError
	var argErr *topology.ArgumentError
	queues := path.Root("queues")
	switch {
	case errors.As(err, &argErr) && argErr.Argument == topology.ArgumentMessageTTL:
		return queueArgumentDiagnostic(argErr.Queue, "message_ttl", argErr.Reason)
	case errors.As(err, &argErr) && argErr.Argument == topology.ArgumentQueueType:
		return queueArgumentDiagnostic(argErr.Queue, "queue_type", argErr.Reason)
	case errors.As(err, &argErr):
		return queueArgumentDiagnostic(argErr.Queue, "max_priority", argErr.Reason)
	case errors.Is(err, topology.ErrInvalidPrefix):
		return diag.NewAttributeErrorDiagnostic(path.Root("prefix"), "Invalid Queue Set Prefix", err.Error())
	case errors.Is(err, topology.ErrNoQueues):
		return diag.NewAttributeErrorDiagnostic(queues, "Queue Set Has No Queues", err.Error())
	case errors.As(err, &nameErr):
		return diag.NewAttributeErrorDiagnostic(queues.AtMapKey(nameErr.Queue), "Invalid Queue Name", err.Error())
	}
	return diag.NewAttributeErrorDiagnostic(queues, "Invalid Queue Set", err.Error())
}
