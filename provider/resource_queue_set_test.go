package provider

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

const addr = "queuey_queue_set.test"

// setConfig writes a queue set resource; queues is the body of the queues
// map, force the force_destroy value.
func setConfig(prefix string, force bool, queues string) string {
	return fmt.Sprintf(`
resource "queuey_queue_set" "test" {
  prefix        = %q
  force_destroy = %t
  queues = {
%s
  }
}
`, prefix, force, queues)
}

func work(prefix, name string) string { return topology.WorkName(prefix, name) }
func dead(prefix, name string) string { return topology.DeadName(topology.WorkName(prefix, name)) }

func TestAccQueueSet_create(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("create")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			// A trailing slash on the endpoint must work.
			Config: b.providerBlock(b.env.endpoint+"/") + setConfig(p, false, `
    emails  = {}
    reports = { max_priority = 0, message_ttl = "90s", durable = false }
    urgent  = { max_priority = 255, message_ttl = "24h" }`),
			Check: resource.ComposeAggregateTestCheckFunc(
				b.checkQueues(p, map[string]wantQueue{
					work(p, "emails"):  {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p, "emails"):  {true, map[string]any{}},
					work(p, "reports"): {false, map[string]any{topology.ArgMessageTTL: int64(90000)}},
					dead(p, "reports"): {true, map[string]any{}},
					work(p, "urgent"):  {true, map[string]any{topology.ArgMaxPriority: int64(255), topology.ArgMessageTTL: int64(86400000)}},
					dead(p, "urgent"):  {true, map[string]any{}},
				}),
				resource.TestCheckResourceAttr(addr, "id", p+"@/"),
				resource.TestCheckResourceAttr(addr, "vhost", "/"),
				resource.TestCheckResourceAttr(addr, "queues.emails.max_priority", "10"),
				resource.TestCheckResourceAttr(addr, "queues.emails.durable", "true"),
				resource.TestCheckResourceAttr(addr, "queues.emails.name", work(p, "emails")),
				resource.TestCheckResourceAttr(addr, "queues.emails.dead_name", dead(p, "emails")),
				resource.TestCheckResourceAttr(addr, "queues.emails.arguments.x-max-priority", "10"),
				resource.TestCheckResourceAttr(addr, "queues.emails.dead_arguments.%", "0"),
				resource.TestCheckResourceAttr(addr, "queues.reports.message_ttl", "90s"),
				resource.TestCheckResourceAttr(addr, "queues.reports.arguments.%", "1"),
				resource.TestCheckResourceAttr(addr, "queues.reports.arguments.x-message-ttl", "90000"),
				resource.TestCheckResourceAttr(addr, "queues.urgent.arguments.x-message-ttl", "86400000"),
			),
		}, {
			// message_ttl and durable are arguments too: reports alone is
			// replaced.
			Config: b.providerBlock("") + setConfig(p, false, `
    emails  = {}
    reports = { max_priority = 0, message_ttl = "2m" }
    urgent  = { max_priority = 255, message_ttl = "24h" }`),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectChangedQueues(addr, "reports"),
				},
			},
			Check: b.checkQueues(p, map[string]wantQueue{
				work(p, "emails"):  {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
				dead(p, "emails"):  {true, map[string]any{}},
				work(p, "reports"): {true, map[string]any{topology.ArgMessageTTL: int64(120000)}},
				dead(p, "reports"): {true, map[string]any{}},
				work(p, "urgent"):  {true, map[string]any{topology.ArgMaxPriority: int64(255), topology.ArgMessageTTL: int64(86400000)}},
				dead(p, "urgent"):  {true, map[string]any{}},
			}),
		}, {
			// The same TTL written another way changes no queue, not even
			// the text in state: only force_destroy changes, and a message
			// in reports is still there.
			PreConfig: func() { b.publish(work(p, "reports"), 1) },
			Config: b.providerBlock("") + setConfig(p, true, `
    emails  = {}
    reports = { max_priority = 0, message_ttl = "120s" }
    urgent  = { max_priority = 255, message_ttl = "1440m" }`),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectChangedQueues(addr),
				},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr(addr, "queues.reports.message_ttl", "2m"),
				resource.TestCheckResourceAttr(addr, "queues.urgent.message_ttl", "24h"),
				b.checkCount(work(p, "reports"), 1),
			),
		}},
	})
}

func TestAccQueueSet_existingQueueWithOtherArguments(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("exists")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			PreConfig: func() {
				if _, err := b.mgmt.DeclareQueue("/", work(p, "a"), rabbitQueue(true, map[string]any{topology.ArgMaxPriority: 3})); err != nil {
					t.Fatal(err)
				}
			},
			Config:      b.providerBlock("") + setConfig(p, false, `a = {}`+"\n"+`b = {}`),
			ExpectError: regexp.MustCompile(`(?s)Queue Already Exists With Other Arguments.*` + regexp.QuoteMeta(work(p, "a")) + `.*terraform\s+import`),
		}, {
			// Nothing was declared: b is not there.
			PreConfig: func() {
				if _, ok := b.queues(p)[work(p, "b")]; ok {
					t.Errorf("queue %s was declared although the create failed", work(p, "b"))
				}
				_, _ = b.mgmt.DeleteQueue("/", work(p, "a"))
			},
			Config: b.providerBlock("") + setConfig(p, false, `a = {}`+"\n"+`b = {}`),
		}},
	})
}

func TestAccQueueSet_addQueue(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("add")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config: b.providerBlock("") + setConfig(p, true, `a = {}`),
		}, {
			PreConfig: func() {
				b.publish(work(p, "a"), 5)
				b.publish(dead(p, "a"), 2)
			},
			Config: b.providerBlock("") + setConfig(p, true, `a = {}`+"\n"+`b = { max_priority = 3 }`),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectChangedQueues(addr, "b"),
				},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				b.checkCount(work(p, "a"), 5),
				b.checkCount(dead(p, "a"), 2),
				b.checkQueues(p, map[string]wantQueue{
					work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p, "a"): {true, map[string]any{}},
					work(p, "b"): {true, map[string]any{topology.ArgMaxPriority: int64(3)}},
					dead(p, "b"): {true, map[string]any{}},
				}),
			),
		}, {
			// Removing a queue deletes just it.
			Config: b.providerBlock("") + setConfig(p, true, `a = {}`),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectChangedQueues(addr, "b"),
				},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				b.checkCount(work(p, "a"), 5),
				b.checkQueues(p, map[string]wantQueue{
					work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p, "a"): {true, map[string]any{}},
				}),
			),
		}},
	})
}

func TestAccQueueSet_removeQueueWithMessages(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("remove")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config: b.providerBlock("") + setConfig(p, false, `a = {}`+"\n"+`b = {}`),
		}, {
			PreConfig: func() {
				b.publish(work(p, "b"), 4)
				b.waitManagementCount(work(p, "b"), 4)
			},
			Config:      b.providerBlock("") + setConfig(p, false, `a = {}`),
			ExpectError: regexp.MustCompile(`(?s)Queue Holds Messages.*` + regexp.QuoteMeta(work(p, "b")) + `.*holds 4 messages.*force_destroy`),
		}, {
			PreConfig: func() {
				if n, err := b.count(work(p, "b")); err != nil || n != 4 {
					t.Errorf("after the refused removal %s holds %d messages (%v), want 4", work(p, "b"), n, err)
				}
			},
			Config: b.providerBlock("") + setConfig(p, true, `a = {}`),
			Check: b.checkQueues(p, map[string]wantQueue{
				work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
				dead(p, "a"): {true, map[string]any{}},
			}),
		}},
	})
}

func TestAccQueueSet_changeMaxPriority(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("change")
	warnings := &planWarnings{}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: warnings.providers(),
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config: b.providerBlock("") + setConfig(p, false, `a = {}`+"\n"+`b = {}`),
		}, {
			// a is empty; b holds a message that must survive a's
			// replacement.
			PreConfig: func() {
				b.publish(work(p, "b"), 1)
				warnings.reset()
			},
			Config: b.providerBlock("") + setConfig(p, false, `a = { max_priority = 5 }`+"\n"+`b = {}`),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectChangedQueues(addr, "a"),
				},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				b.checkQueues(p, map[string]wantQueue{
					work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(5)}},
					dead(p, "a"): {true, map[string]any{}},
					work(p, "b"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p, "b"): {true, map[string]any{}},
				}),
				b.checkCount(work(p, "b"), 1),
				resource.TestCheckResourceAttr(addr, "queues.a.arguments.x-max-priority", "5"),
				warnings.check("a", regexp.MustCompile(`(?s)queue "`+regexp.QuoteMeta(work(p, "a"))+`" \(0 messages\) will be migrated.*x-max-priority 10 → 5`)),
			),
		}, {
			// a now holds messages: the change migrates them, and the
			// plan said how many would move.
			PreConfig: func() {
				b.publish(work(p, "a"), 3)
				b.waitManagementCount(work(p, "a"), 3)
				warnings.reset()
			},
			Config: b.providerBlock("") + setConfig(p, false, `a = { max_priority = 7 }`+"\n"+`b = {}`),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectChangedQueues(addr, "a"),
				},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				b.checkCount(work(p, "a"), 3),
				b.checkCount(work(p, "b"), 1),
				b.checkQueues(p, map[string]wantQueue{
					work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(7)}},
					dead(p, "a"): {true, map[string]any{}},
					work(p, "b"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p, "b"): {true, map[string]any{}},
				}),
				warnings.check("a", regexp.MustCompile(`(?s)queue "`+regexp.QuoteMeta(work(p, "a"))+`" \(3 messages\) will be migrated.*x-max-priority 5 → 7`)),
			),
		}, {
			// Back to no priorities at all, with the messages still there;
			// force_destroy only so that the test's destroy may discard them.
			Config: b.providerBlock("") + setConfig(p, true, `a = { max_priority = 0 }`+"\n"+`b = {}`),
			Check: resource.ComposeAggregateTestCheckFunc(
				b.checkCount(work(p, "a"), 3),
				b.checkCount(work(p, "b"), 1),
				b.checkQueues(p, map[string]wantQueue{
					work(p, "a"): {true, map[string]any{}},
					dead(p, "a"): {true, map[string]any{}},
					work(p, "b"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p, "b"): {true, map[string]any{}},
				}),
			),
		}},
	})
}

func TestAccQueueSet_driftAndImport(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("drift")
	queues := `a = { message_ttl = "24h" }` + "\n" + `b = { max_priority = 0, durable = false }` + "\n" + `c = { message_ttl = "1m30s", max_priority = 2 }`
	cfg := b.providerBlock("") + setConfig(p, false, queues)
	want := map[string]wantQueue{
		work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(10), topology.ArgMessageTTL: int64(86400000)}},
		dead(p, "a"): {true, map[string]any{}},
		work(p, "b"): {false, map[string]any{}},
		dead(p, "b"): {true, map[string]any{}},
		work(p, "c"): {true, map[string]any{topology.ArgMaxPriority: int64(2), topology.ArgMessageTTL: int64(90000)}},
		dead(p, "c"): {true, map[string]any{}},
	}
	warnings := &planWarnings{}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: warnings.providers(),
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			PreConfig: func() {
				// A hold queue of the set, as the runtime would declare it,
				// must not disturb the plan.
				hold := topology.HoldName(work(p, "a"), 600000)
				if _, err := b.mgmt.DeclareQueue("/", hold, rabbitQueue(true, topology.HoldArgs(work(p, "a"), 600000))); err != nil {
					t.Fatal(err)
				}
			},
			Config: cfg,
		}, {
			// Queues deleted behind Terraform's back are planned back, as
			// an update of the set that touches nothing else: b's work
			// queue and a's dead-letter queue.
			PreConfig: func() {
				b.deleteQueues(work(p, "b"), dead(p, "a"))
				warnings.reset()
			},
			Config: cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectChangedQueues(addr, "a", "b"),
				},
			},
			Check: resource.ComposeAggregateTestCheckFunc(b.checkQueues(p, withHold(want, p)), warnings.noneBut(summaryTransientDeprecated)),
		}, {
			// Both of b's queues gone: b is planned back whole.
			PreConfig: func() {
				b.deleteQueues(work(p, "b"), dead(p, "b"))
				warnings.reset()
			},
			Config: cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectChangedQueues(addr, "b"),
				},
			},
			Check: resource.ComposeAggregateTestCheckFunc(b.checkQueues(p, withHold(want, p)), warnings.noneBut(summaryTransientDeprecated)),
		}, {
			// c's arguments changed behind Terraform's back: planned as a
			// replacement of c alone, carried out since c is empty.
			PreConfig: func() {
				if _, err := b.mgmt.DeleteQueue("/", work(p, "c")); err != nil {
					t.Fatal(err)
				}
				if _, err := b.mgmt.DeclareQueue("/", work(p, "c"), rabbitQueue(true, map[string]any{topology.ArgMaxPriority: 9})); err != nil {
					t.Fatal(err)
				}
				warnings.reset()
			},
			Config: cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectChangedQueues(addr, "c"),
				},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				b.checkQueues(p, withHold(want, p)),
				warnings.check("c", regexp.MustCompile(`x-max-priority 9 → 2, x-message-ttl \(none\) → 90000`)),
			),
		}, {
			ResourceName:      addr,
			ImportState:       true,
			ImportStateId:     p + "@/",
			ImportStateVerify: true,
		}, {
			// A bare prefix means the default virtual host.
			ResourceName:      addr,
			ImportState:       true,
			ImportStateId:     p,
			ImportStateVerify: true,
		}, {
			ResourceName:  addr,
			ImportState:   true,
			ImportStateId: "tfacc-no-such-prefix@/",
			ExpectError:   regexp.MustCompile(`Queue Set Not Found`),
		}},
	})
}

// withHold adds the hold queue TestAccQueueSet_driftAndImport declares.
func withHold(want map[string]wantQueue, p string) map[string]wantQueue {
	out := map[string]wantQueue{}
	for k, v := range want {
		out[k] = v
	}
	args := map[string]any{}
	for k, v := range topology.HoldArgs(work(p, "a"), 600000) {
		args[k] = v
	}
	out[topology.HoldName(work(p, "a"), 600000)] = wantQueue{true, args}
	return out
}

// ttlPath is the path of a queue's message_ttl in plan and state.
func ttlPath(queue string) tfjsonpath.Path {
	return tfjsonpath.New("queues").AtMapKey(queue).AtMapKey("message_ttl")
}

// TestAccQueueSet_importedMessageTTLPlansNoChange pins a bug: an import
// writes message_ttl as "1m30s", and a configuration saying "90s" then
// planned an update from "1m30s" to "90s" that changed nothing.
func TestAccQueueSet_importedMessageTTLPlansNoChange(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("ttlimport")
	// The first step imports before any config step, and there
	// terraform-plugin-testing writes no required_providers block: OpenTofu
	// would then look hashicorp/queuey up in its registry. Say the source.
	cfg := requiredProvidersBlock() + b.providerBlock("") + setConfig(p, false, `a = { message_ttl = "90s" }`)
	warnings := &planWarnings{}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: warnings.providers(),
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			// The set exists before Terraform knows it, as when an
			// application declared it at start-up. An import block plans
			// no change (the test fails on any other action).
			PreConfig: func() {
				tq := topology.Queue{Name: "a", MaxPriority: topology.DefaultMaxPriority, MessageTTL: 90 * time.Second, Durable: true}
				if _, err := b.mgmt.DeclareQueue("/", work(p, "a"), rabbitQueue(true, topology.WorkArgs(tq))); err != nil {
					t.Fatal(err)
				}
				if _, err := b.mgmt.DeclareQueue("/", dead(p, "a"), rabbitQueue(topology.DeadDurable, topology.DeadArgs(""))); err != nil {
					t.Fatal(err)
				}
			},
			Config:          cfg,
			ResourceName:    addr,
			ImportState:     true,
			ImportStateKind: resource.ImportBlockWithID,
			ImportStateId:   p + "@/",
			ImportPlanChecks: resource.ImportPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectKnownValue(addr, ttlPath("a"), knownvalue.StringExact("1m30s")),
				},
			},
		}, {
			// terraform import, kept as the state of the steps below.
			Config:             cfg,
			ResourceName:       addr,
			ImportState:        true,
			ImportStateId:      p + "@/",
			ImportStatePersist: true,
			ImportStateCheck: func(states []*terraform.InstanceState) error {
				if len(states) != 1 {
					return fmt.Errorf("imported %d resources, want 1", len(states))
				}
				if got := states[0].Attributes["queues.a.message_ttl"]; got != "1m30s" {
					return fmt.Errorf("imported message_ttl = %q, want the canonical 1m30s", got)
				}
				return nil
			},
		}, {
			PreConfig: warnings.reset,
			Config:    cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr(addr, "queues.a.message_ttl", "1m30s"),
				warnings.none(),
			),
		}},
	})
}

// TestAccQueueSet_messageTTLSpelling shows that message_ttl is a duration,
// not text: written another way it changes nothing, neither the queue nor
// the state, while another duration replaces the queue.
func TestAccQueueSet_messageTTLSpelling(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("ttltext")
	cfg := func(ttl string) string {
		return b.providerBlock("") + setConfig(p, false, fmt.Sprintf(`a = { message_ttl = %q }`+"\n"+`b = {}`, ttl))
	}
	want := func(ttl int64) map[string]wantQueue {
		return map[string]wantQueue{
			work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(10), topology.ArgMessageTTL: ttl}},
			dead(p, "a"): {true, map[string]any{}},
			work(p, "b"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
			dead(p, "b"): {true, map[string]any{}},
		}
	}
	warnings := &planWarnings{}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: warnings.providers(),
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config: cfg("90s"),
			Check:  resource.TestCheckResourceAttr(addr, "queues.a.message_ttl", "90s"),
		}, {
			// Read finds 90000 ms on the broker, "1m30s", and keeps "90s".
			RefreshState: true,
			Check:        resource.TestCheckResourceAttr(addr, "queues.a.message_ttl", "90s"),
		}, {
			// "90s" -> "1m30s": no change at all, no migration warning.
			PreConfig: warnings.reset,
			Config:    cfg("1m30s"),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr(addr, "queues.a.message_ttl", "90s"),
				b.checkQueues(p, want(90000)),
				warnings.none(),
			),
		}, {
			// "90s" -> "91s" is another duration: a is replaced, and the
			// plan says so.
			PreConfig: warnings.reset,
			Config:    cfg("91s"),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectChangedQueues(addr, "a"),
					plancheck.ExpectKnownValue(addr, ttlPath("a"), knownvalue.StringExact("91s")),
				},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr(addr, "queues.a.message_ttl", "91s"),
				b.checkQueues(p, want(91000)),
				warnings.check("a", regexp.MustCompile(`x-message-ttl 90000 → 91000`)),
			),
		}},
	})
}

func TestAccQueueSet_destroyWithDeadLetters(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("destroy")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config: b.providerBlock("") + setConfig(p, false, `a = {}`+"\n"+`b = {}`),
		}, {
			PreConfig: func() {
				b.publish(dead(p, "b"), 2)
				b.waitManagementCount(dead(p, "b"), 2)
			},
			Config:      b.providerBlock("") + setConfig(p, false, `a = {}`+"\n"+`b = {}`),
			Destroy:     true,
			ExpectError: regexp.MustCompile(`(?s)Queue Set Holds Messages.*` + regexp.QuoteMeta(dead(p, "b")) + `.*holds 2 messages`),
		}, {
			PreConfig: func() {
				if n, err := b.count(dead(p, "b")); err != nil || n != 2 {
					t.Errorf("after the refused destroy %s holds %d messages (%v), want 2", dead(p, "b"), n, err)
				}
			},
			// With force_destroy the destroy at the end of the test
			// succeeds, and CheckDestroy sees nothing left.
			Config: b.providerBlock("") + setConfig(p, true, `a = {}`+"\n"+`b = {}`),
			Check:  b.checkCount(dead(p, "b"), 2),
		}},
	})
}

// TestAccQueueSet_refreshListsOnce shows that a refresh costs one request
// to the management API, whatever the number of queues: a plan with no
// change makes exactly one, the list of the vhost's queues.
func TestAccQueueSet_refreshListsOnce(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("count")
	proxy := newCountingProxy(t, b.env.endpoint)
	var queues []string
	for i := 0; i < 12; i++ {
		queues = append(queues, fmt.Sprintf("q%02d = {}", i))
	}
	cfg := b.providerBlock(proxy.server.URL) + setConfig(p, false, strings.Join(queues, "\n"))
	checkOneList := func() {
		seen := proxy.seen()
		// A PlanOnly step runs one plan without and one with refresh.
		if len(seen) != 1 || seen[0] != "GET /api/queues/%2F" {
			t.Errorf("the no-change plan made %d management API requests %v, want exactly one GET /api/queues/%%2F", len(seen), seen)
		}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config: cfg,
		}, {
			PreConfig: proxy.reset,
			Config:    cfg,
			PlanOnly:  true,
		}, {
			PreConfig: checkOneList,
			Config:    cfg,
			PlanOnly:  true,
		}},
	})
}

func TestAccQueueSet_validation(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("valid")
	long := strings.Repeat("x", topology.MaxWorkNameBytes-len(p))
	cases := []struct {
		prefix, queues string
		err            string
	}{
		{"", `a = {}`, `(?s)Invalid Queue Set Prefix.*must not be empty`},
		{p + ".", `a = {}`, `(?s)Invalid Queue Set Prefix.*must not end in '\.'`},
		{"amq.x", `a = {}`, `(?s)Invalid Queue Set Prefix.*amq\.`},
		{p, ``, `(?s)Queue Set Has No Queues`},
		{p, `"" = {}`, `(?s)Invalid Queue Name.*must not be empty`},
		{p, `"` + long + `" = {}`, `(?s)Invalid Queue Name.*shorten the prefix or the name`},
		{p, `x = {}` + "\n" + `"x.dead" = {}`, `(?s)Invalid Queue Name.*collides with queue`},
		{p, `a = { max_priority = -1 }`, `(?s)Invalid Max Priority.*-1 is out of range`},
		{p, `a = { max_priority = 256 }`, `(?s)Invalid Max Priority.*256 is out of range`},
		{p, `a = { message_ttl = "ninety seconds" }`, `(?s)Invalid Message TTL.*not a duration`},
		{p, `a = { message_ttl = "-5s" }`, `(?s)Invalid Message TTL.*negative`},
		{p, `a = { message_ttl = "1500us" }`, `(?s)Invalid Message TTL.*whole number of milliseconds`},
		{p, `a = { message_ttl = "1200h" }`, `(?s)Invalid Message TTL.*longer than RabbitMQ's limit`},
	}
	var steps []resource.TestStep
	for _, c := range cases {
		steps = append(steps, resource.TestStep{
			Config:      b.providerBlock("") + setConfig(c.prefix, false, c.queues),
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(c.err),
		})
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps:                    steps,
	})
}

// expectChangedQueues is a plan check that the resource's plan changes
// exactly the named entries of its queues map and leaves every other entry
// as it was, computed values included.
func expectChangedQueues(address string, names ...string) plancheck.PlanCheck {
	return changedQueuesCheck{address: address, names: names}
}

type changedQueuesCheck struct {
	address string
	names   []string
}

func (c changedQueuesCheck) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	for _, rc := range req.Plan.ResourceChanges {
		if rc.Address != c.address {
			continue
		}
		before, _ := rc.Change.Before.(map[string]any)
		after, _ := rc.Change.After.(map[string]any)
		bq, _ := before["queues"].(map[string]any)
		aq, _ := after["queues"].(map[string]any)
		keys := map[string]bool{}
		for k := range bq {
			keys[k] = true
		}
		for k := range aq {
			keys[k] = true
		}
		var changed []string
		for k := range keys {
			if !reflect.DeepEqual(bq[k], aq[k]) {
				changed = append(changed, k)
			}
		}
		sort.Strings(changed)
		want := append([]string(nil), c.names...)
		sort.Strings(want)
		if !reflect.DeepEqual(changed, want) {
			resp.Error = fmt.Errorf("%s: the plan changes queues %v, want exactly %v", c.address, changed, want)
		}
		return
	}
	resp.Error = fmt.Errorf("%s: not in the plan", c.address)
}

// TestAccQueueSet_example applies the documented example, so that the docs
// cannot show a configuration that does not work.
func TestAccQueueSet_example(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("example")
	example, err := os.ReadFile("../examples/resources/queuey_queue_set/resource.tf")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.ReplaceAll(string(example), `"myapp"`, strconv.Quote(p))
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config: b.providerBlock("") + cfg,
			Check: resource.ComposeAggregateTestCheckFunc(
				b.checkQueues(p, map[string]wantQueue{
					work(p, "emails"):   {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p, "emails"):   {true, map[string]any{}},
					work(p, "reports"):  {true, map[string]any{topology.ArgMessageTTL: int64(86400000)}},
					dead(p, "reports"):  {true, map[string]any{}},
					work(p, "webhooks"): {true, map[string]any{topology.ArgMaxPriority: int64(5), topology.ArgMessageTTL: int64(90000)}},
					dead(p, "webhooks"): {true, map[string]any{}},
				}),
				resource.TestCheckOutput("emails_queue", work(p, "emails")),
			),
		}, {
			// The documented import id form, in an import block beside the
			// example: the import plans no change. The example writes
			// "90s", which the import reads as the canonical "1m30s", as
			// the docs say, and the plan keeps.
			ResourceName:    "queuey_queue_set.example",
			ImportState:     true,
			ImportStateKind: resource.ImportBlockWithID,
			ImportStateId:   p + "@/",
			ImportPlanChecks: resource.ImportPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectKnownValue("queuey_queue_set.example", ttlPath("webhooks"), knownvalue.StringExact("1m30s")),
				},
			},
		}},
	})
}

// requiredProvidersBlock is the terraform block that names the provider's
// source as terraform-plugin-testing serves it: registry.terraform.io/
// hashicorp/queuey unless TF_ACC_PROVIDER_HOST and TF_ACC_PROVIDER_NAMESPACE
// say otherwise (as they do for OpenTofu). A config with a terraform block
// of its own is used by terraform-plugin-testing as it is.
func requiredProvidersBlock() string {
	host, namespace := os.Getenv("TF_ACC_PROVIDER_HOST"), os.Getenv("TF_ACC_PROVIDER_NAMESPACE")
	if host == "" {
		host = "registry.terraform.io"
	}
	if namespace == "" {
		namespace = "hashicorp"
	}
	return fmt.Sprintf("terraform {\n  required_providers {\n    queuey = { source = %q }\n  }\n}\n", host+"/"+namespace+"/queuey")
}
