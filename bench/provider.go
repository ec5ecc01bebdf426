package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"

	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// providerWorkers is the concurrency of the raw twin that the provider is
// held to: it declares with 8 requests in flight too.
const providerWorkers = 8

// countingProxy sits between Terraform's provider and the management API and
// counts the requests, and the TCP connections they came on, since reset,
// and when the first write (PUT, DELETE) arrived and the last was answered.
type countingProxy struct {
	mu          sync.Mutex
	requests    map[string]int
	conns       map[string]bool
	first, last time.Time
	server      *httptest.Server
}

func newCountingProxy(target string) (*countingProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	p := &countingProxy{}
	p.reset()
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = rawTransport()
	p.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.EscapedPath()
		// Collapse one queue's path to its kind, so that 400 declares
		// count as one line.
		if parts := strings.Split(key, "/"); len(parts) == 5 && parts[1] == "api" && parts[2] == "queues" {
			key = strings.Join(parts[:4], "/") + "/{queue}"
		}
		p.mu.Lock()
		p.requests[key]++
		p.conns[r.RemoteAddr] = true
		write := r.Method != http.MethodGet
		if write && p.first.IsZero() {
			p.first = time.Now()
		}
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
		if write {
			p.mu.Lock()
			p.last = time.Now()
			p.mu.Unlock()
		}
	}))
	return p, nil
}

func (p *countingProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = map[string]int{}
	p.conns = map[string]bool{}
	p.first, p.last = time.Time{}, time.Time{}
}

// window returns when the first write since the last reset arrived and
// when the last was answered (zero times when there was none).
func (p *countingProxy) window() (first, last time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first, p.last
}

// take returns the requests and connections counted since the last reset,
// and resets.
func (p *countingProxy) take() (total int, detail string, conns int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var keys []string
	for k, n := range p.requests {
		total += n
		keys = append(keys, fmt.Sprintf("%d× %s", n, k))
	}
	sort.Strings(keys)
	detail, conns = strings.Join(keys, ", "), len(p.conns)
	p.requests, p.conns = map[string]int{}, map[string]bool{}
	p.first, p.last = time.Time{}, time.Time{}
	return total, detail, conns
}

// findTerraform returns the terraform binary: the flag, else what
// scripts/terraform.sh finds or builds, else PATH.
func (b *bench) findTerraform(root string) (string, error) {
	if b.c.terraform != "" {
		return b.c.terraform, nil
	}
	out, err := exec.Command("bash", filepath.Join(root, "scripts", "terraform.sh")).Output()
	if err == nil {
		if p := strings.TrimSpace(string(out)); p != "" {
			return p, nil
		}
	}
	return exec.LookPath("terraform")
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("run the bench from inside the repository")
	}
	return filepath.Dir(gomod), nil
}

// tf is a Terraform working directory with the provider under test.
type tf struct {
	bin, dir string
	env      []string
}

func (t *tf) run(ctx context.Context, args ...string) (time.Duration, int, string, error) {
	cmd := exec.CommandContext(ctx, t.bin, args...)
	cmd.Dir = t.dir
	cmd.Env = t.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code, err = ee.ExitCode(), nil
	}
	return took, code, out.String(), err
}

// setConfig is a Terraform configuration of one queue set of n default
// queues under prefix, through the proxy.
func setConfig(endpoint, user, pass, prefix string, n int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, `terraform {
  required_providers {
    queuey = { source = "queuey/queuey" }
  }
}

provider "queuey" {
  endpoint = %q
  username = %q
  password = %q
}

resource "queuey_queue_set" "bench" {
  prefix = %q
  queues = {
`, endpoint, user, pass, prefix)
	for i := range n {
		fmt.Fprintf(&sb, "    q%03d = {}\n", i)
	}
	sb.WriteString("  }\n}\n")
	return sb.String()
}

// terraformSetup finds the terraform binary, builds the provider into tmp
// unless -provider-bin names one, and writes a CLI configuration in tmp whose
// dev override points at it. It returns the binary and that configuration.
func (b *bench) terraformSetup(ctx context.Context, tmp string) (tfBin, rc string, err error) {
	root, err := moduleRoot()
	if err != nil {
		return "", "", err
	}
	tfBin, err = b.findTerraform(root)
	if err != nil {
		return "", "", fmt.Errorf("no terraform binary (pass -terraform): %w", err)
	}
	if out, err := exec.Command(tfBin, "version").Output(); err == nil {
		b.report.terraform = strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
	}
	binDir := b.c.providerBin
	if binDir == "" {
		binDir = filepath.Join(tmp, "bin")
		log.Printf("  building the provider into %s", binDir)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(binDir, "terraform-provider-queuey"), ".")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("build the provider: %v\n%s", err, out)
		}
	}
	rc = filepath.Join(tmp, "dev.tfrc")
	if err := os.WriteFile(rc, fmt.Appendf(nil, "provider_installation {\n  dev_overrides {\n    \"queuey/queuey\" = %q\n  }\n  direct {}\n}\n", binDir), 0o644); err != nil {
		return "", "", err
	}
	return tfBin, rc, nil
}

// providerSection: terraform apply, a no-change plan and destroy of a queue
// set, beside rabbit-hole declaring, listing and deleting the same broker
// queues, serially and with 8 workers.
func (b *bench) providerSection(ctx context.Context) error {
	tmp, err := os.MkdirTemp("", "queuey-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	tfBin, rc, err := b.terraformSetup(ctx, tmp)
	if err != nil {
		return err
	}
	proxy, err := newCountingProxy(b.c.mgmtURL)
	if err != nil {
		return err
	}
	defer proxy.server.Close()
	env := append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1")

	var mu sync.Mutex
	requests := map[string][]string{} // variant/op -> detail per run
	note := func(key, detail string) {
		mu.Lock()
		defer mu.Unlock()
		requests[key] = append(requests[key], detail)
	}

	runNo := map[string]int{}
	tfRun := func(label string, n int) func(ctx context.Context) (map[string]float64, error) {
		return func(ctx context.Context) (map[string]float64, error) {
			runNo[label]++
			prefix := b.name(fmt.Sprintf("tf%d-%d", n, runNo[label]))
			dir := filepath.Join(tmp, fmt.Sprintf("tf%d-%d", n, runNo[label]))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(setConfig(proxy.server.URL, b.c.user, b.c.pass, prefix, n)), 0o644); err != nil {
				return nil, err
			}
			t := &tf{bin: tfBin, dir: dir, env: env}
			m := map[string]float64{}
			proxy.take()
			for _, op := range []struct {
				name string
				args []string
				want int
			}{
				{"apply", []string{"apply", "-auto-approve", "-input=false", "-no-color"}, 0},
				{"plan", []string{"plan", "-detailed-exitcode", "-input=false", "-no-color"}, 0},
				{"destroy", []string{"destroy", "-auto-approve", "-input=false", "-no-color"}, 0},
			} {
				start := time.Now()
				took, code, out, err := t.run(ctx, op.args...)
				end := time.Now()
				// Where the command's time went: before the provider's
				// first write (Terraform and the provider starting,
				// refresh and plan), the writes, and after the last.
				if first, last := proxy.window(); !first.IsZero() {
					m[op.name+" before requests"] = first.Sub(start).Seconds()
					m[op.name+" requests window"] = last.Sub(first).Seconds()
					m[op.name+" after requests"] = end.Sub(last).Seconds()
				}
				if err != nil || code != op.want {
					if op.name != "destroy" {
						_, _, _, _ = t.run(context.Background(), "destroy", "-auto-approve", "-input=false", "-no-color")
					}
					return nil, fmt.Errorf("terraform %s exited %d (%v):\n%s", op.name, code, err, tail(out, 2000))
				}
				total, detail, conns := proxy.take()
				m[op.name] = took.Seconds()
				m[op.name+" requests"] = float64(total)
				note(fmt.Sprintf("%s %s", label, op.name), fmt.Sprintf("%d requests on %d connections (%s)", total, conns, detail))
			}
			return m, nil
		}
	}

	rawRun := func(workers int) func(ctx context.Context) (map[string]float64, error) {
		return func(ctx context.Context) (map[string]float64, error) {
			runNo[fmt.Sprint(workers)]++
			prefix := b.name(fmt.Sprintf("rh%d-%d", workers, runNo[fmt.Sprint(workers)]))
			type q struct {
				name string
				args map[string]any
			}
			var qs []q
			for i := range b.c.setQueues {
				work := topology.WorkName(prefix, fmt.Sprintf("q%03d", i))
				qs = append(qs, q{work, topology.WorkArgs(topology.Queue{Name: fmt.Sprintf("q%03d", i), MaxPriority: topology.DefaultMaxPriority, Durable: true})})
				qs = append(qs, q{topology.DeadName(work), topology.DeadArgs("")})
			}
			m := map[string]float64{}
			start := time.Now()
			if err := firstErr(parallel(workers, len(qs), func(i int) error {
				res, err := b.rh.DeclareQueue("/", qs[i].name, rabbithole.QueueSettings{Durable: true, Arguments: qs[i].args})
				drainBody(res)
				return err
			})); err != nil {
				return nil, err
			}
			m["apply"] = time.Since(start).Seconds()
			start = time.Now()
			listed, err := b.rh.ListQueuesWithParametersIn("/", url.Values{"columns": {"name,durable,type,arguments,messages"}})
			if err != nil {
				return nil, err
			}
			m["plan"] = time.Since(start).Seconds()
			found := 0
			for _, l := range listed {
				if strings.HasPrefix(l.Name, prefix+".") {
					found++
				}
			}
			if found != len(qs) {
				return nil, fmt.Errorf("listed %d of the %d queues declared", found, len(qs))
			}
			start = time.Now()
			if err := firstErr(parallel(workers, len(qs), func(i int) error {
				res, err := b.rh.DeleteQueue("/", qs[i].name, rabbithole.QueueDeleteOptions{IfEmpty: true})
				drainBody(res)
				return err
			})); err != nil {
				return nil, err
			}
			m["destroy"] = time.Since(start).Seconds()
			return m, nil
		}
	}

	n := b.c.setQueues
	big := fmt.Sprintf("terraform %d queues", n)
	s, err := measure(ctx, b.c.providerRuns, []variant{
		{big, tfRun(big, n)},
		{"raw rabbit-hole ×1", rawRun(1)},
		{"raw rabbit-hole ×8", rawRun(providerWorkers)},
		{"raw rabbit-hole ×16", rawRun(2 * providerWorkers)},
		{"terraform 1 queue", tfRun("terraform 1 queue", 1)},
	})
	if err != nil {
		return err
	}
	bq := 2 * n
	b.report.add(s, "provider", fmt.Sprintf("terraform apply, %d queues (%d broker queues)", n, bq), "s",
		big, "apply", "raw rabbit-hole ×8", "apply", fmt.Sprintf("rabbit-hole declare %d, 8 workers", bq), false, 1.5)
	b.report.add(s, "provider", fmt.Sprintf("terraform apply, %d queues, vs serial", n), "s",
		big, "apply", "raw rabbit-hole ×1", "apply", fmt.Sprintf("rabbit-hole declare %d, serial", bq), false, 0)
	b.report.add(s, "provider", fmt.Sprintf("terraform destroy, %d queues", n), "s",
		big, "destroy", "raw rabbit-hole ×8", "destroy", fmt.Sprintf("rabbit-hole delete %d, 8 workers", bq), false, 1.5)
	b.report.add(s, "provider", fmt.Sprintf("terraform destroy, %d queues, vs serial", n), "s",
		big, "destroy", "raw rabbit-hole ×1", "destroy", fmt.Sprintf("rabbit-hole delete %d, serial", bq), false, 0)
	b.report.add(s, "provider", fmt.Sprintf("for scale: rabbit-hole declare %d with 16 workers, vs 8", bq), "s",
		"raw rabbit-hole ×16", "apply", "raw rabbit-hole ×8", "apply", fmt.Sprintf("rabbit-hole declare %d, 8 workers", bq), false, 0)
	b.report.add(s, "provider", fmt.Sprintf("for scale: rabbit-hole delete %d with 16 workers, vs 8", bq), "s",
		"raw rabbit-hole ×16", "destroy", "raw rabbit-hole ×8", "destroy", fmt.Sprintf("rabbit-hole delete %d, 8 workers", bq), false, 0)
	b.report.add(s, "provider", fmt.Sprintf("terraform plan, no change, %d queues", n), "s",
		big, "plan", "raw rabbit-hole ×8", "plan", "rabbit-hole list once", false, 0)
	b.report.add(s, "provider", fmt.Sprintf("terraform plan, no change, %d queues, beside 1 queue", n), "s",
		big, "plan", "terraform 1 queue", "plan", "the same plan of a 1-queue set", false, 2)
	b.report.add(s, "provider", "terraform's fixed cost: apply of a 1-queue set", "s",
		"terraform 1 queue", "apply", "", "", "", false, 0)
	b.report.add(s, "provider", "terraform's fixed cost: no-change plan of a 1-queue set", "s",
		"terraform 1 queue", "plan", "", "", "", false, 0)
	b.report.add(s, "provider", "terraform's fixed cost: destroy of a 1-queue set", "s",
		"terraform 1 queue", "destroy", "", "", "", false, 0)
	for _, op := range []string{"apply", "destroy"} {
		for _, part := range []struct{ key, what string }{
			{"before requests", "before the first write (Terraform and the provider starting, refresh, plan)"},
			{"requests window", "from the first write (PUT, DELETE) to the last one's answer"},
			{"after requests", "after the last write's answer (Terraform writing the state and exiting)"},
		} {
			b.report.add(s, "provider", fmt.Sprintf("terraform %s, %d queues: %s", op, n, part.what), "s",
				big, op+" "+part.key, "", "", "", false, 0)
		}
	}
	for _, size := range []struct {
		label string
		n     int
	}{{big, n}, {"terraform 1 queue", 1}} {
		b.report.add(s, "provider", fmt.Sprintf("management API requests of a no-change plan, %d queue(s)", size.n), "requests",
			size.label, "plan requests", "", "", "", false, 0)
		r := &b.report.rows[len(b.report.rows)-1]
		r.target = "= 1"
		r.met = "yes"
		for _, x := range r.allQ {
			if x != 1 {
				r.met = "no"
			}
		}
	}
	var keys []string
	for k := range requests {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.report.notes = append(b.report.notes, fmt.Sprintf("%s: %s", k, requests[k][0]))
	}
	return nil
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func drainBody(res *http.Response) {
	if res != nil && res.Body != nil {
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
