package provider

import (
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// summaryQuorumNoPriorities is the summary of the plan's warning about
// quorum queues on a broker whose quorum queues have no priorities.
const summaryQuorumNoPriorities = "Quorum Queue Without Priorities"

// quorumDiagnostics is the plan's word on each queue_type = "quorum" queue
// of queues, for what the broker's version makes of priorities: nothing on
// RabbitMQ 4.0 and later, whose quorum queues have two levels that queuey's
// deferrals use; a warning on 3.x, whose quorum queues deliver in order, so
// that a deferred job waits behind the backlog instead of going ahead of it.
// (An explicit max_priority on a quorum queue is an error on every version,
// reported by validation: RabbitMQ refuses x-max-priority on quorum queues.)
// It asks the broker only when there is such a queue.
func (r *queueSetResource) quorumDiagnostics(prefix string, queues map[string]queueModel) diag.Diagnostics {
	var quorum []string
	for _, name := range sortedKeys(queues) {
		if typeOf(queues[name]) == topology.QuorumQueueType {
			quorum = append(quorum, name)
		}
	}
	var diags diag.Diagnostics
	if len(quorum) == 0 || r.data == nil {
		return diags
	}
	ov, err := r.data.broker.client.Overview()
	if err != nil {
		diags.AddWarning("Quorum Queues Not Checked",
			fmt.Sprintf("Queues %s set queue_type = \"quorum\", and the provider could not read the broker's version to say what their priorities do (RabbitMQ 3.x quorum queues have none): %s", strings.Join(quoteAll(quorum), ", "), err))
		return diags
	}
	if versionAtLeast(ov.RabbitMQVersion, 4, 0) {
		return diags
	}
	for _, name := range quorum {
		diags.AddAttributeWarning(path.Root("queues").AtMapKey(name), summaryQuorumNoPriorities,
			fmt.Sprintf("RabbitMQ %s's quorum queues have no priorities: they deliver in order. Queue %q sets queue_type = \"quorum\", so a job its handler defers waits behind the backlog of %q instead of going ahead of it, as on a classic queue or on RabbitMQ 4.0 and later (whose quorum queues have two priority levels). "+
				"Upgrade to RabbitMQ 4.0 or later for deferrals ahead of the backlog, or keep the queue classic.",
				ov.RabbitMQVersion, name, topology.WorkName(prefix, name)))
	}
	return diags
}
