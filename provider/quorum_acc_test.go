package provider

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// checkTypes checks the broker's type of each queue named in want.
func (b *testBroker) checkTypes(prefix string, want map[string]string) resource.TestCheckFunc {
	return func(*terraformState) error {
		got := b.queues(prefix)
		for name, typ := range want {
			q, ok := got[name]
			if !ok {
				return fmt.Errorf("broker has no queue %q", name)
			}
			if q.Type != typ || !q.Durable {
				return fmt.Errorf("queue %q: type %q durable %t, want a durable %s queue", name, q.Type, q.Durable, typ)
			}
		}
		return nil
	}
}

// quorumWarned checks the plan's warnings since the last reset: on
// RabbitMQ 3.x one "Quorum Queue Without Priorities" at each of queues,
// on 4.x none of them.
func (w *planWarnings) quorumWarned(version string, queues ...string) resource.TestCheckFunc {
	return func(*terraformState) error {
		seen := map[string]bool{}
		for _, d := range w.seen() {
			if d.Summary == summaryQuorumNoPriorities {
				steps := d.Attribute.Steps()
				seen[fmt.Sprint(steps[len(steps)-1])] = true
			}
		}
		want := 0
		if !versionAtLeast(version, 4, 0) {
			want = len(queues)
		}
		if len(seen) != want {
			return fmt.Errorf("RabbitMQ %s: quorum warnings at %v, want %d (about %v)", version, seen, want, queues)
		}
		return nil
	}
}

// TestAccQueueSet_quorum declares a set with a quorum queue, plans it with
// no changes, migrates a classic queue holding messages to quorum and
// back, and refuses what a quorum queue cannot be.
func TestAccQueueSet_quorum(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("quorum")
	ov, err := b.mgmt.Overview()
	if err != nil {
		t.Fatal(err)
	}
	warnings := &planWarnings{}
	quorumWork := map[string]any{topology.ArgQueueType: "quorum", topology.ArgDeliveryLimit: int64(topology.WorkDeliveryLimit)}
	quorumDead := map[string]any{topology.ArgQueueType: "quorum", topology.ArgDeliveryLimit: int64(topology.UnlimitedDeliveries)}
	checkArgs := func(name string, want map[string]any) resource.TestCheckFunc {
		return func(*terraformState) error {
			q, ok := b.queues(p)[name]
			if !ok {
				return fmt.Errorf("broker has no queue %q", name)
			}
			args := topology.WithoutDefaults(normalizeArgs(q.Arguments))
			if len(args) != len(want) {
				return fmt.Errorf("queue %q arguments = %v, want %v", name, args, want)
			}
			for k, v := range want {
				if args[k] != v {
					return fmt.Errorf("queue %q argument %s = %#v, want %#v", name, k, args[k], v)
				}
			}
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: warnings.providers(),
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			PreConfig: warnings.reset,
			Config:    b.providerBlock("") + setConfig(p, false, `a = {}`+"\n"+`b = { queue_type = "quorum" }`),
			Check: resource.ComposeAggregateTestCheckFunc(
				b.checkTypes(p, map[string]string{work(p, "a"): "classic", dead(p, "a"): "classic", work(p, "b"): "quorum", dead(p, "b"): "quorum"}),
				checkArgs(work(p, "b"), quorumWork),
				checkArgs(dead(p, "b"), quorumDead),
				resource.TestCheckResourceAttr(addr, "queues.b.queue_type", "quorum"),
				resource.TestCheckResourceAttr(addr, "queues.b.max_priority", "0"),
				resource.TestCheckResourceAttr(addr, "queues.b.arguments.%", "1"),
				resource.TestCheckResourceAttr(addr, "queues.b.arguments.x-delivery-limit", "20"),
				resource.TestCheckResourceAttr(addr, "queues.b.dead_arguments.x-delivery-limit", "2147483647"),
				resource.TestCheckResourceAttr(addr, "queues.a.queue_type", "classic"),
				resource.TestCheckResourceAttr(addr, "queues.a.max_priority", "10"),
				resource.TestMatchResourceAttr(addr, "runtime_config", regexp.MustCompile(`"name":"b",[^}]*"queue_type":"quorum"`)),
				warnings.quorumWarned(ov.RabbitMQVersion, "b"),
			),
		}, {
			// Read back from the broker, the set plans no change.
			Config:   b.providerBlock("") + setConfig(p, false, `a = {}`+"\n"+`b = { queue_type = "quorum" }`),
			PlanOnly: true,
		}, {
			// a holds messages; becoming a quorum queue migrates them.
			PreConfig: func() {
				b.publish(work(p, "a"), 3)
				b.waitManagementCount(work(p, "a"), 3)
			},
			Config: b.providerBlock("") + setConfig(p, false, `a = { queue_type = "quorum" }`+"\n"+`b = { queue_type = "quorum" }`),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectChangedQueues(addr, "a"),
				},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				b.checkTypes(p, map[string]string{work(p, "a"): "quorum", dead(p, "a"): "quorum"}),
				checkArgs(work(p, "a"), quorumWork),
				checkArgs(dead(p, "a"), quorumDead),
				b.checkCount(work(p, "a"), 3),
				resource.TestCheckResourceAttr(addr, "queues.a.max_priority", "0"),
			),
		}, {
			Config:      b.providerBlock("") + setConfig(p, false, `a = { queue_type = "quorum" }`+"\n"+`b = { queue_type = "quorum", max_priority = 5 }`),
			ExpectError: regexp.MustCompile(`(?s)max_priority 5 is refused on a quorum queue`),
		}, {
			Config:      b.providerBlock("") + setConfig(p, false, `a = { queue_type = "quorum" }`+"\n"+`b = { queue_type = "quorum", durable = false }`),
			ExpectError: regexp.MustCompile(`(?s)quorum needs a durable queue`),
		}, {
			Config:      b.providerBlock("") + setConfig(p, false, `a = { queue_type = "quorum" }`+"\n"+`b = { queue_type = "stream" }`),
			ExpectError: regexp.MustCompile(`(?s)"stream" is not a queue type queuey declares`),
		}, {
			// And back to classic, with its default priority, the
			// messages kept; force_destroy so the test's destroy may
			// discard them.
			Config: b.providerBlock("") + setConfig(p, true, `a = {}`+"\n"+`b = { queue_type = "quorum" }`),
			Check: resource.ComposeAggregateTestCheckFunc(
				b.checkTypes(p, map[string]string{work(p, "a"): "classic", dead(p, "a"): "classic"}),
				checkArgs(work(p, "a"), map[string]any{topology.ArgMaxPriority: int64(10)}),
				checkArgs(dead(p, "a"), map[string]any{}),
				b.checkCount(work(p, "a"), 3),
			),
		}},
	})
}
