package provider

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// TestAccQueueSet_importBlock applies the documented import block
// (examples/resources/queuey_queue_set/import-by-string-id.tf) beside the
// documented resource, written as a configuration and applied, the way a
// user would: the set an application declared is taken over with its
// messages, the plan shows the import and no change, and nothing is declared
// or deleted. An import block naming a set that does not exist fails the plan
// with the provider's diagnostic.
func TestAccQueueSet_importBlock(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("importblock")
	example := func(name string) string {
		raw, err := os.ReadFile("../examples/resources/queuey_queue_set/" + name)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(raw), `"myapp@/"`, strconv.Quote(p+"@/"))
		return strings.ReplaceAll(s, `"myapp"`, strconv.Quote(p))
	}
	const exampleAddr = "queuey_queue_set.example"
	resourceCfg := b.providerBlock("") + example("resource.tf")
	importCfg := resourceCfg + example("import-by-string-id.tf")
	if !strings.Contains(importCfg, "import {") {
		t.Fatal("the documented import example has no import block")
	}

	// The set as an application declares it at start-up, with the
	// arguments the example's resource block gives.
	declared := []topology.Queue{
		{Name: "emails", MaxPriority: topology.DefaultMaxPriority, Durable: true},
		{Name: "reports", MessageTTL: 24 * time.Hour, Durable: true},
		{Name: "webhooks", MaxPriority: 5, MessageTTL: 90 * time.Second, Durable: true},
	}
	want := map[string]wantQueue{}
	for _, q := range declared {
		want[work(p, q.Name)] = wantQueue{true, topology.WorkArgs(q)}
		want[dead(p, q.Name)] = wantQueue{topology.DeadDurable, topology.DeadArgs("")}
	}

	missing := p + "-missing"
	missingCfg := resourceCfg + fmt.Sprintf(`
resource "queuey_queue_set" "missing" {
  prefix = %q
  queues = { a = {} }
}

import {
  to = queuey_queue_set.missing
  id = %q
}
`, missing, missing+"@/")

	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			PreConfig: func() {
				for _, q := range declared {
					if _, err := b.mgmt.DeclareQueue("/", work(p, q.Name), rabbitQueue(q.Durable, topology.WorkArgs(q))); err != nil {
						t.Fatal(err)
					}
					if _, err := b.mgmt.DeclareQueue("/", dead(p, q.Name), rabbitQueue(topology.DeadDurable, topology.DeadArgs(""))); err != nil {
						t.Fatal(err)
					}
				}
				b.publish(work(p, "emails"), 3)
			},
			Config: importCfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{expectImportNoChange(exampleAddr, p+"@/")},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr(exampleAddr, "id", p+"@/"),
				resource.TestCheckResourceAttr(exampleAddr, "prefix", p),
				resource.TestCheckResourceAttr(exampleAddr, "queues.webhooks.max_priority", "5"),
				resource.TestCheckOutput("emails_queue", work(p, "emails")),
				b.checkQueues(p, want),
				b.checkCount(work(p, "emails"), 3),
			),
		}, {
			// The import block removed once applied, as the example says:
			// the set stays managed and nothing is planned.
			Config: resourceCfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
			},
			Check: b.checkCount(work(p, "emails"), 3),
		}, {
			Config:      missingCfg,
			ExpectError: regexp.MustCompile(`Queue Set Not Found`),
		}, {
			// The messages are the reason destroy would refuse; this test
			// is about import, so let destroy take them.
			Config: strings.Replace(resourceCfg, `prefix = `+strconv.Quote(p), `prefix = `+strconv.Quote(p)+"\n  force_destroy = true", 1),
			Check:  b.checkCount(work(p, "emails"), 3),
		}},
	})
}

// expectImportNoChange checks that the plan imports address with id and
// changes nothing else about it.
func expectImportNoChange(address, id string) plancheck.PlanCheck {
	return importCheck{address, id}
}

type importCheck struct{ address, id string }

func (c importCheck) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	for _, rc := range req.Plan.ResourceChanges {
		if rc.Address != c.address {
			continue
		}
		switch {
		case rc.Change.Importing == nil:
			resp.Error = fmt.Errorf("%s: the plan does not import it (actions %v)", c.address, rc.Change.Actions)
		case rc.Change.Importing.ID != c.id:
			resp.Error = fmt.Errorf("%s: the plan imports id %q, want %q", c.address, rc.Change.Importing.ID, c.id)
		case !rc.Change.Actions.NoOp():
			resp.Error = fmt.Errorf("%s: the import plans %v, want no change", c.address, rc.Change.Actions)
		}
		return
	}
	resp.Error = fmt.Errorf("%s: not in the plan", c.address)
}
