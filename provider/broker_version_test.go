package provider

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// TestAccQueueSet_defaultQueueTypeIsNoDifference pins that the
// x-queue-type "classic" RabbitMQ 4 lists among every classic queue's
// arguments changes nothing: a no-change plan is empty and warns of
// nothing, and a migration plan warns only of the migration. On RabbitMQ
// 3.x, which does not list it, the test shows the same.
func TestAccQueueSet_defaultQueueTypeIsNoDifference(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("qtype")
	warnings := &planWarnings{}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: warnings.providers(),
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config: b.providerBlock("") + setConfig(p, true, `a = { message_ttl = "1h" }`),
		}, {
			PreConfig: warnings.reset,
			Config:    b.providerBlock("") + setConfig(p, true, `a = { message_ttl = "1h" }`),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				warnings.none(),
				resource.TestCheckNoResourceAttr(addr, "queues.a.arguments.x-queue-type"),
				resource.TestCheckResourceAttr(addr, "queues.a.arguments.%", "2"),
				resource.TestCheckResourceAttr(addr, "queues.a.dead_arguments.%", "0"),
			),
		}, {
			PreConfig: func() {
				b.publish(work(p, "a"), 3)
				b.waitManagementCount(work(p, "a"), 3)
				warnings.reset()
			},
			Config: b.providerBlock("") + setConfig(p, true, `a = { message_ttl = "1h", max_priority = 4 }`),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{expectChangedQueues(addr, "a")},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				warnings.check("a", regexp.MustCompile(`\(3 messages\) will be migrated.*x-max-priority 10 → 4`)),
				b.checkCount(work(p, "a"), 3),
				b.checkQueues(p, map[string]wantQueue{
					work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(4), topology.ArgMessageTTL: int64(3600000)}},
					dead(p, "a"): {true, map[string]any{}},
				}),
			),
		}},
	})
}
