package provider

// The provider on a three-node cluster whose first node is down (issue 17),
// through the real Terraform binary like the other acceptance tests:
//
//	bash scripts/cluster.sh start
//	eval "$(bash scripts/cluster.sh env)"
//	TF_ACC=1 flock /tmp/queuey-cluster.lock go test -run TestAccProvider_clusterFirstNodeDown ./provider/
//
// The test stops node 1 and starts it again when it ends, passed or not.
// Other tests stop nodes of the same cluster: run each under the lock.

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// testCluster is where the three-node cluster of scripts/cluster.sh is:
// each node's management API and AMQP URL, in node order.
type testCluster struct {
	endpoints, amqpURLs []string
}

// getTestCluster reads QUEUEY_CLUSTER_ENDPOINTS and QUEUEY_CLUSTER_AMQP_URLS
// (comma-separated, as `scripts/cluster.sh env` prints them), and skips the
// test when they are unset.
func getTestCluster(t *testing.T) testCluster {
	t.Helper()
	brokertest.Acceptance(t)
	eps, urls := os.Getenv("QUEUEY_CLUSTER_ENDPOINTS"), os.Getenv("QUEUEY_CLUSTER_AMQP_URLS")
	if eps == "" || urls == "" {
		t.Skip("needs the three-node cluster: run `bash scripts/cluster.sh start`, then `eval \"$(bash scripts/cluster.sh env)\"` to set QUEUEY_CLUSTER_ENDPOINTS and QUEUEY_CLUSTER_AMQP_URLS")
	}
	// It stops a node: no other test may meanwhile.
	brokertest.LockCluster(t)
	c := testCluster{endpoints: strings.Split(eps, ","), amqpURLs: strings.Split(urls, ",")}
	if len(c.endpoints) != 3 || len(c.amqpURLs) != 3 {
		t.Fatalf("QUEUEY_CLUSTER_ENDPOINTS and QUEUEY_CLUSTER_AMQP_URLS list %d and %d nodes, want 3 each", len(c.endpoints), len(c.amqpURLs))
	}
	return c
}

// amqpHostList is the nodes' AMQP URLs as one URL that lists every host,
// amqp://user:pass@h1:5691,h2:5692,h3:5693/, as the provider's amqp_url
// takes it.
func (c testCluster) amqpHostList(t *testing.T) string {
	t.Helper()
	hosts := make([]string, len(c.amqpURLs))
	for i, u := range c.amqpURLs {
		parsed, err := url.Parse(u)
		if err != nil || parsed.Host == "" {
			t.Fatalf("QUEUEY_CLUSTER_AMQP_URLS entry %d is not a URL with a host", i+1)
		}
		hosts[i] = parsed.Host
	}
	return strings.Replace(c.amqpURLs[0], "@"+hosts[0], "@"+strings.Join(hosts, ","), 1)
}

// clusterScript runs scripts/cluster.sh with args, from the repository
// root found beside this file, and fails the test when it fails.
func clusterScript(t *testing.T, args ...string) {
	t.Helper()
	_, here, _, _ := goruntime.Caller(0)
	root := filepath.Dir(filepath.Dir(here))
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "scripts", "cluster.sh")}, args...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/cluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("scripts/cluster.sh %s:\n%s", strings.Join(args, " "), out)
}

// stopNode stops node n of the cluster, and starts it again when the test
// ends, passed or not, so that the cluster is whole for the next test.
func (c testCluster) stopNode(t *testing.T, n int) {
	t.Helper()
	t.Cleanup(func() { clusterScript(t, "restart", fmt.Sprint(n)) })
	clusterScript(t, "stopnode", fmt.Sprint(n))
	if err := c.checkDown(n)(nil); err != nil {
		t.Fatal(err)
	}
}

// checkDown is a TestCheckFunc: node n refuses connections on its
// management and AMQP ports, so that what the step did, it did without
// node n (a node that stopnode found starting would be back by now).
func (c testCluster) checkDown(n int) resource.TestCheckFunc {
	return func(*terraformState) error {
		for _, u := range []string{c.endpoints[n-1], c.amqpURLs[n-1]} {
			parsed, err := url.Parse(u)
			if err != nil {
				return err
			}
			conn, err := net.DialTimeout("tcp", parsed.Host, 5*time.Second)
			if err == nil {
				_ = conn.Close()
				return fmt.Errorf("node %d still accepts connections on %s: something started it again (run the cluster tests under flock /tmp/queuey-cluster.lock)", n, parsed.Host)
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("node %d's %s: %v; want the connection refused", n, parsed.Host, err)
			}
		}
		return nil
	}
}

func TestAccProvider_clusterFirstNodeDown(t *testing.T) {
	c := getTestCluster(t)
	env := brokertest.FromEnv()
	// The test's own line to the cluster goes through node 2, which stays
	// up.
	b := openTestBroker(t, brokertest.Env{AMQPURL: c.amqpURLs[1], Endpoint: c.endpoints[1], Username: env.Username, Password: env.Password})
	p := b.uniquePrefix("cluster")
	c.stopNode(t, 1)

	provider := fmt.Sprintf(`
provider "queuey" {
  endpoint = %q
  amqp_url = %q
  username = %q
  password = %q
}
`, strings.Join(c.endpoints, ","), c.amqpHostList(t), env.Username, env.Password)
	queues := `a = {}` + "\n" + `b = {}`
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		// The destroy too goes through the nodes that are up.
		CheckDestroy: resource.ComposeTestCheckFunc(c.checkDown(1), b.checkDestroyed(p)),
		Steps: []resource.TestStep{{
			Config: provider + setConfig(p, false, queues),
			Check: resource.ComposeAggregateTestCheckFunc(
				c.checkDown(1),
				b.checkQueues(p, map[string]wantQueue{
					work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p, "a"): {true, map[string]any{}},
					work(p, "b"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p, "b"): {true, map[string]any{}},
				}),
			),
		}, {
			// A refresh and a plan through the nodes that are up find
			// nothing to change.
			Config:   provider + setConfig(p, false, queues),
			PlanOnly: true,
		}, {
			// A migration over AMQP, which dials node 1 first, moves every
			// message of a across and back.
			PreConfig: func() { b.publish(work(p, "a"), 5) },
			Config:    provider + setConfig(p, true, `a = { max_priority = 5 }`+"\n"+`b = {}`),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					expectChangedQueues(addr, "a"),
				},
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				c.checkDown(1),
				b.checkCount(work(p, "a"), 5),
				b.checkQueues(p, map[string]wantQueue{
					work(p, "a"): {true, map[string]any{topology.ArgMaxPriority: int64(5)}},
					dead(p, "a"): {true, map[string]any{}},
					work(p, "b"): {true, map[string]any{topology.ArgMaxPriority: int64(10)}},
					dead(p, "b"): {true, map[string]any{}},
				}),
			),
		}},
	})
}
