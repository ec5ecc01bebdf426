package provider

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

const dataAddr = "data.queuey_queue_set.read"

// The data source reads a set it does not manage: names, arguments, counts
// of messages and consumers, hold queues, and the runtime config.
func TestAccQueueSetDataSource(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("data")
	resourceCfg := b.providerBlock("") + setConfig(p, true, `
    emails  = {}
    reports = { max_priority = 0, message_ttl = "90s" }`)
	hold := topology.HoldName(work(p, "emails"), 60000)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: resourceCfg,
		}, {
			PreConfig: func() {
				b.publish(work(p, "emails"), 3)
				b.publish(dead(p, "emails"), 2)
				ch, err := b.conn.Channel()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ch.QueueDeclare(hold, true, false, false, false, topology.HoldArgs(work(p, "emails"), 60000)); err != nil {
					t.Fatal(err)
				}
				b.publish(hold, 1)
				// A consumer on reports, held open until the test ends.
				if _, err := ch.Consume(work(p, "reports"), "", false, false, false, false, nil); err != nil {
					t.Fatal(err)
				}
				b.waitManagementCount(work(p, "emails"), 3)
				b.waitManagementCount(dead(p, "emails"), 2)
				b.waitManagementCount(hold, 1)
				waitConsumers(t, b, work(p, "reports"), 1)
			},
			Config: resourceCfg + fmt.Sprintf(`
data "queuey_queue_set" "read" {
  prefix = %q
  depends_on = [queuey_queue_set.test]
}
`, p),
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr(dataAddr, "id", p+"@/"),
				resource.TestCheckResourceAttr(dataAddr, "queues.%", "2"),
				resource.TestCheckResourceAttr(dataAddr, "queues.emails.name", work(p, "emails")),
				resource.TestCheckResourceAttr(dataAddr, "queues.emails.dead_name", dead(p, "emails")),
				resource.TestCheckResourceAttr(dataAddr, "queues.emails.max_priority", "10"),
				resource.TestCheckResourceAttr(dataAddr, "queues.emails.durable", "true"),
				resource.TestCheckResourceAttr(dataAddr, "queues.emails.arguments.x-max-priority", "10"),
				resource.TestCheckResourceAttr(dataAddr, "queues.emails.messages", "3"),
				resource.TestCheckResourceAttr(dataAddr, "queues.emails.consumers", "0"),
				resource.TestCheckResourceAttr(dataAddr, "queues.emails.dead_messages", "2"),
				resource.TestCheckResourceAttr(dataAddr, "queues.emails.hold_queues.#", "1"),
				resource.TestCheckResourceAttr(dataAddr, "queues.emails.hold_queues.0.name", hold),
				resource.TestCheckResourceAttr(dataAddr, "queues.emails.hold_queues.0.delay_ms", "60000"),
				resource.TestCheckResourceAttr(dataAddr, "queues.emails.hold_queues.0.messages", "1"),
				resource.TestCheckResourceAttr(dataAddr, "queues.reports.max_priority", "0"),
				resource.TestCheckResourceAttr(dataAddr, "queues.reports.message_ttl", "1m30s"),
				resource.TestCheckResourceAttr(dataAddr, "queues.reports.arguments.x-message-ttl", "90000"),
				resource.TestCheckResourceAttr(dataAddr, "queues.reports.consumers", "1"),
				resource.TestCheckResourceAttr(dataAddr, "queues.reports.hold_queues.#", "0"),
				// What the broker has is what Terraform declared.
				resource.TestCheckResourceAttrPair(dataAddr, "runtime_config", addr, "runtime_config"),
			),
		}, {
			Config: b.providerBlock("") + `
data "queuey_queue_set" "read" {
  prefix = "queuey-no-such-set"
}
`,
			ExpectError: regexp.MustCompile(`Queue Set Not Found`),
		}},
	})
}

// waitConsumers waits until the management API reports want consumers on
// queue.
func waitConsumers(t *testing.T, b *testBroker, queue string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		q, err := b.mgmt.GetQueueWithParameters("/", queue, url.Values{"columns": {"name,consumers"}})
		if err == nil && q.Consumers == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the management API did not report %d consumers on %s within 30s (last: %v)", want, queue, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// A producer built from the resource's runtime_config declares against the
// applied set without PRECONDITION_FAILED, enqueues onto it and delays
// through it; one written by hand with the Go defaults is refused.
func TestAccQueueSet_runtimeConfigRoundTrip(t *testing.T) {
	b := newTestBroker(t)
	p := b.uniquePrefix("rtcfg")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             b.checkDestroyed(p),
		Steps: []resource.TestStep{{
			Config: b.providerBlock("") + setConfig(p, true, `
    emails  = { max_priority = 5 }
    reports = { max_priority = 0, message_ttl = "24h", durable = false }`),
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr(addr, "runtime_config", fmt.Sprintf(`{"version":1,"vhost":"/","prefix":%q,"queues":[`+
					`{"name":"emails","work_queue":%q,"dead_queue":%q,"max_priority":5,"message_ttl_ms":0,"durable":true},`+
					`{"name":"reports","work_queue":%q,"dead_queue":%q,"max_priority":0,"message_ttl_ms":86400000,"durable":false}]}`,
					p, work(p, "emails"), dead(p, "emails"), work(p, "reports"), dead(p, "reports"))),
				func(s *terraformState) error {
					cfg := s.RootModule().Resources[addr].Primary.Attributes["runtime_config"]
					set, err := queuey.ParseQueueSet([]byte(cfg))
					if err != nil {
						return err
					}
					ctx := context.Background()
					prod, err := queuey.NewProducer(ctx, b.env.amqpURL, set, nil)
					if err != nil {
						return fmt.Errorf("a producer from runtime_config: %w", err)
					}
					defer prod.Close()
					if _, err := prod.Enqueue(ctx, "emails", "welcome", map[string]string{"to": "ada"}, nil); err != nil {
						return err
					}
					if _, err := prod.EnqueueAfter(ctx, "reports", "daily", 1, time.Minute, nil); err != nil {
						return err
					}
					if err := b.checkCount(work(p, "emails"), 1)(s); err != nil {
						return err
					}
					// The same set written by hand with Go's defaults
					// differs, and the broker says so.
					hand := queuey.QueueSet{Prefix: p, Queues: []queuey.QueueConfig{{Name: "emails"}, {Name: "reports"}}}
					if other, err := queuey.NewProducer(ctx, b.env.amqpURL, hand, nil); !errors.Is(err, queuey.ErrPreconditionFailed) {
						if other != nil {
							other.Close()
						}
						return fmt.Errorf("a hand-written set with other arguments declared with %v, want PRECONDITION_FAILED", err)
					}
					// The hold queue the delay declared goes before the
					// destroy's check.
					ch, err := b.conn.Channel()
					if err != nil {
						return err
					}
					defer ch.Close()
					_, err = ch.QueueDelete(topology.HoldName(work(p, "reports"), 60000), false, false, false)
					return err
				},
			),
		}},
	})
}
