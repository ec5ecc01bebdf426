package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// lineOf is the 1-based line of config that holds text, as Terraform
// numbers the lines of terraform_plugin_test.tf: a config with a terraform
// block of its own (requiredProvidersBlock) is written as it is.
func lineOf(t *testing.T, config, text string) int {
	t.Helper()
	for i, l := range strings.Split(config, "\n") {
		if strings.Contains(l, text) {
			return i + 1
		}
	}
	t.Fatalf("%q is not in the configuration", text)
	return 0
}

// TestAccQueueSet_queueArgumentErrorsShowTheQueuesLine pins where Terraform
// renders an error about a queue's max_priority or message_ttl: at the
// queue's "orders = {" line, with that line quoted, and a detail that names
// the queue and the attribute. (Reported at queues["orders"].max_priority,
// Terraform showed the resource's first line, since it cannot show a
// position inside a nested map attribute.)
func TestAccQueueSet_queueArgumentErrorsShowTheQueuesLine(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("position")
	for _, c := range []struct {
		attribute, summary, detail string
	}{
		{`max_priority = 300`, "Invalid Max Priority", `Queue "orders": max_priority 300 is out of range`},
		{`message_ttl  = "abc"`, "Invalid Message TTL", `Queue "orders": message_ttl "abc" is not a duration`},
		{`message_ttl  = "-5s"`, "Invalid Message TTL", `Queue "orders": message_ttl -5s is negative`},
	} {
		t.Run(c.summary+" "+c.attribute, func(t *testing.T) {
			config := requiredProvidersBlock() + b.providerBlock("") + setConfig(p, false, `
    emails = {}
    orders = {
      durable = true
      `+c.attribute+`
    }`)
			n := lineOf(t, config, "orders = {")
			// Terraform wraps a long detail; the words may be split across lines.
			detail := strings.ReplaceAll(regexp.QuoteMeta(c.detail), " ", `\s+`)
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProviders,
				Steps: []resource.TestStep{{
					Config:   config,
					PlanOnly: true,
					ExpectError: regexp.MustCompile(fmt.Sprintf(`(?s)Error: %s\s+with queuey_queue_set\.test,\s+`+
						`on terraform_plugin_test\.tf line %d, in resource "queuey_queue_set" "test":\s+%d:\s+orders = \{\s+%s`,
						regexp.QuoteMeta(c.summary), n, n, detail)),
				}},
			})
		})
	}
}

// TestAccQueueSet_messageTTLInDays pins that the provider reads the
// durations it prints: the error about "50d" quotes the limit as
// "49d 17h 2m 47s 295ms", and that text, pasted into the configuration,
// declares the queue with that TTL; the same duration in hours, as an
// import writes it, plans no change.
func TestAccQueueSet_messageTTLInDays(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("days")
	limit := "49d 17h 2m 47s 295ms"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config:   b.providerBlock("") + setConfig(p, false, `a = { message_ttl = "50d" }`),
			PlanOnly: true,
			ExpectError: regexp.MustCompile(`(?s)Invalid Message TTL.*Queue "a": message_ttl 50d is longer than\s+RabbitMQ's\s+limit\s+of\s+4294967295\s+ms\s+\(` +
				strings.ReplaceAll(regexp.QuoteMeta(limit), " ", `\s+`) + `\)`),
		}, {
			Config: b.providerBlock("") + setConfig(p, false, `a = { message_ttl = "`+limit+`" }`+"\n"+`b = { message_ttl = "7d" }`),
			Check: resource.ComposeAggregateTestCheckFunc(
				b.checkQueues(p, map[string]wantQueue{
					work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(10), topology.ArgMessageTTL: topology.MaxMessageTTL}},
					dead(p, "a"): {true, map[string]any{}},
					work(p, "b"): {true, map[string]any{topology.ArgMaxPriority: int64(10), topology.ArgMessageTTL: int64(7 * 24 * 3600 * 1000)}},
					dead(p, "b"): {true, map[string]any{}},
				}),
				resource.TestCheckResourceAttr(addr, "queues.a.message_ttl", limit),
				resource.TestCheckResourceAttr(addr, "queues.a.arguments.x-message-ttl", "4294967295"),
			),
		}, {
			// The same durations as an import writes them, and in Go's
			// syntax: no change, and the state keeps its text.
			Config: b.providerBlock("") + setConfig(p, false, `a = { message_ttl = "1193h2m47s295ms" }`+"\n"+`b = { message_ttl = "168h" }`),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(),
					plancheck.ExpectKnownValue(addr, ttlPath("a"), knownvalue.StringExact(limit)),
				},
			},
		}},
	})
}
