package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
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

// TestAccQueueSet_transientQueueOnABrokerThatRefusesThem runs against a
// broker that refuses transient non-exclusive queues (RabbitMQ 4.3's
// default; a 4.0.5 node with the deprecated feature denied): the plan of a
// set with durable = false fails at that queue's line, naming the queue and
// the remedy, and creates nothing; with durable = true the set applies.
func TestAccQueueSet_transientQueueOnABrokerThatRefusesThem(t *testing.T) {
	brokertest.Acceptance(t)
	b := openTestBroker(t, brokertest.Strict(t))
	p := b.uniquePrefix("strict")
	config := requiredProvidersBlock() + b.providerBlock("") + setConfig(p, false, `
    kept = {}
    fleeting = {
      durable = false
    }`)
	n := lineOf(t, config, "fleeting = {")
	detail := strings.ReplaceAll(regexp.QuoteMeta(fmt.Sprintf(`refuses transient (non-durable) non-exclusive queues: its deprecated feature transient_nonexcl_queues is not permitted, as from RabbitMQ 4.3 by default. Queue "fleeting" sets durable = false, so the broker would refuse its work queue %q`, work(p, "fleeting"))), " ", `\s+`)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config: config,
			ExpectError: regexp.MustCompile(fmt.Sprintf(`(?s)Error: Transient Queue Refused\s+with queuey_queue_set\.test,\s+`+
				`on terraform_plugin_test\.tf line %d, in resource "queuey_queue_set" "test":\s+%d:\s+fleeting = \{.*RabbitMQ \d+\.\d+\.\d+ %s.*Set\s+durable\s+=\s+true.*deprecated_features\.permit\.transient_nonexcl_queues\s+=\s+true`,
				n, n, detail)),
		}, {
			PreConfig: func() {
				if left := b.queues(p); len(left) > 0 {
					t.Errorf("the refused plan left %d queues behind", len(left))
				}
			},
			Config: b.providerBlock("") + setConfig(p, false, `
    kept = {}
    fleeting = {
      durable = true
    }`),
			Check: b.checkQueues(p, map[string]wantQueue{
				work(p, "kept"):     {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
				dead(p, "kept"):     {true, map[string]any{}},
				work(p, "fleeting"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
				dead(p, "fleeting"): {true, map[string]any{}},
			}),
		}},
	})
}

// TestAccQueueSet_transientQueueWarnings pins what a plan says of a
// durable = false queue on the broker the tests run against: nothing on
// RabbitMQ before 3.13, a warning at the queue on 3.13 and later, which
// deprecate transient queues; and the probe leaves no queue behind.
func TestAccQueueSet_transientQueueWarnings(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("transient")
	ov, err := b.mgmt.Overview()
	if err != nil {
		t.Fatal(err)
	}
	warnings := &planWarnings{}
	want := warnings.none()
	if versionAtLeast(ov.RabbitMQVersion, 3, 13) {
		want = func(*terraformState) error {
			// Terraform plans twice, before the apply and during it.
			seen := warnings.seen()
			for _, d := range seen {
				if d.Summary != summaryTransientDeprecated ||
					!strings.Contains(d.Detail, "RabbitMQ "+ov.RabbitMQVersion+" accepts transient") ||
					!strings.Contains(d.Detail, fmt.Sprintf("Queue %q sets durable = false", "fleeting")) {
					return fmt.Errorf("RabbitMQ %s: plan warning %q: %s; want only Transient Queue Deprecated about \"fleeting\"", ov.RabbitMQVersion, d.Summary, d.Detail)
				}
			}
			if len(seen) == 0 {
				return fmt.Errorf("RabbitMQ %s: the plan gave no warning about the transient queue \"fleeting\"", ov.RabbitMQVersion)
			}
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: warnings.providers(),
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config: b.providerBlock("") + setConfig(p, false, `
    kept = {}
    fleeting = { durable = false }`),
			Check: resource.ComposeAggregateTestCheckFunc(
				want,
				b.checkQueues(p, map[string]wantQueue{
					work(p, "kept"):     {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p, "kept"):     {true, map[string]any{}},
					work(p, "fleeting"): {false, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p, "fleeting"): {true, map[string]any{}},
				}),
			),
		}},
	})
}

// TestAccQueueSet_migrationRefusesAnAMQPURLOfAnotherBroker pins that a
// migration checks that amqp_url reaches the broker the endpoint manages:
// with amqp_url pointing at another broker (here the strict node), the
// apply of a priority change fails, saying so, and the queue keeps its
// arguments and its messages, where before the migration ran on the other
// broker.
func TestAccQueueSet_migrationRefusesAnAMQPURLOfAnotherBroker(t *testing.T) {
	b := newTestBroker(t)
	other := brokertest.Strict(t)
	p := b.uniquePrefix("elsewhere")
	ob := brokertest.Open(t, other)
	ob.Own(p) // whatever a migration on the wrong broker made goes too
	elsewhere := *b
	elsewhere.env.amqpURL = other.AMQPURL
	wrong := elsewhere.providerBlock("") // the test broker's endpoint, the other's AMQP URL
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config: b.providerBlock("") + setConfig(p, true, `a = {}`),
		}, {
			PreConfig: func() {
				b.publish(work(p, "a"), 3)
				b.waitManagementCount(work(p, "a"), 3)
			},
			Config:      wrong + setConfig(p, true, `a = { max_priority = 4 }`),
			ExpectError: regexp.MustCompile(`(?s)reaches\s+RabbitMQ\s+cluster\s+"[^"]+",\s+but\s+endpoint.*manages\s+cluster.*Nothing\s+was\s+changed`),
		}, {
			Config: b.providerBlock("") + setConfig(p, true, `a = {}`),
			Check: resource.ComposeAggregateTestCheckFunc(
				b.checkCount(work(p, "a"), 3),
				b.checkQueues(p, map[string]wantQueue{
					work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p, "a"): {true, map[string]any{}},
				}),
				func(*terraformState) error {
					if left := ob.Queues(p); len(left) > 0 {
						return fmt.Errorf("the refused migration made %d queues of %q on the other broker", len(left), p)
					}
					return nil
				},
			),
		}},
	})
}
