//go:build faults

package faults

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The provider is run the way users run it: the terraform CLI, with the
// provider built from this repository through a dev override, at
// TF_LOG=TRACE, so that the test can read everything Terraform prints,
// logs and stores.

// tfHarness is a built provider and a CLI configuration pointing at it.
type tfHarness struct {
	t   *testing.T
	tf  string
	dir string
	rc  string
}

func newTFHarness(t *testing.T) *tfHarness {
	t.Helper()
	tf := os.Getenv("TF_ACC_TERRAFORM_PATH")
	if tf == "" {
		var err error
		if tf, err = exec.LookPath("terraform"); err != nil {
			t.Fatalf("no terraform binary (TF_ACC_TERRAFORM_PATH or PATH): %v", err)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "terraform-provider-queuey"), ".")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the provider: %v\n%s", err, out)
	}
	rc := filepath.Join(dir, "dev.tfrc")
	mustWrite(t, rc, fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"queuey/queuey\" = %q\n  }\n  direct {}\n}\n", bin))
	return &tfHarness{t: t, tf: tf, dir: dir, rc: rc}
}

// tfRun is what one apply (and the destroy after a successful one) left.
type tfRun struct {
	applyErr error
	output   string // CLI output of apply and destroy
	state    string // terraform.tfstate after the apply
	trace    string // TF_LOG=TRACE log
}

func (r tfRun) all() string { return r.output + "\n" + r.state + "\n" + r.trace }

// diagnostics are the "Error: …" blocks of the output, each summary with
// its detail (the source excerpt Terraform quotes left out), on one line.
func (r tfRun) diagnostics() []string {
	var out []string
	var cur []string
	flush := func() {
		if cur != nil {
			out = append(out, strings.Join(cur, " "))
		}
		cur = nil
	}
	for _, l := range strings.Split(r.output, "\n") {
		l = strings.TrimSpace(l)
		if s, ok := strings.CutPrefix(l, "Error: "); ok {
			flush()
			cur = []string{s + " —"}
			continue
		}
		if cur == nil || l == "" || strings.HasPrefix(l, "with ") || strings.HasPrefix(l, "on ") || regexp.MustCompile(`^\d+:`).MatchString(l) {
			continue
		}
		cur = append(cur, l)
	}
	flush()
	return out
}

// apply writes main.tf with providerBody inside the provider block and a
// one-queue set, runs terraform apply, and terraform destroy if it worked.
func (h *tfHarness) apply(name, providerBody, vhost, prefix string, env ...string) tfRun {
	h.t.Helper()
	work := filepath.Join(h.dir, name)
	_ = os.MkdirAll(work, 0o755)
	mustWrite(h.t, filepath.Join(work, "main.tf"), `
terraform {
  required_providers {
    queuey = { source = "queuey/queuey" }
  }
}
provider "queuey" {
`+providerBody+`}
`+queueSet(vhost, prefix))
	logFile := filepath.Join(h.dir, name+".log")
	var r tfRun
	var out strings.Builder
	for _, verb := range []string{"apply", "destroy"} {
		cmd := exec.Command(h.tf, verb, "-auto-approve", "-no-color")
		cmd.Dir = work
		cmd.Env = append(append(os.Environ(), "TF_CLI_CONFIG_FILE="+h.rc, "TF_LOG=TRACE", "TF_LOG_PATH="+logFile, "TF_IN_AUTOMATION=1"), env...)
		b, err := cmd.CombinedOutput()
		out.Write(b)
		if verb == "apply" {
			r.applyErr = err
			st, _ := os.ReadFile(filepath.Join(work, "terraform.tfstate"))
			r.state = string(st)
			if err != nil {
				break
			}
		} else if err != nil {
			h.t.Errorf("%s: terraform destroy: %v\n%s", name, err, b)
		}
	}
	r.output = out.String()
	lg, _ := os.ReadFile(logFile)
	r.trace = string(lg)
	return r
}

func queueSet(vhost, prefix string) string {
	return fmt.Sprintf(`
resource "queuey_queue_set" "t" {
  vhost  = %q
  prefix = %q
  queues = { jobs = {} }
}
`, vhost, prefix)
}

// providerBody is the inside of a provider block.
func providerBody(endpoint, password, ca, cert, key string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  endpoint = %q\n  username = %q\n", endpoint, faultsUser)
	if password != "" {
		fmt.Fprintf(&b, "  password = %q\n", password)
	}
	if ca != "" {
		fmt.Fprintf(&b, "  ca_file = %q\n", certFile(ca))
	}
	if cert != "" {
		fmt.Fprintf(&b, "  client_cert_file = %q\n  client_key_file = %q\n", certFile(cert), certFile(key))
	}
	return b.String()
}

// tls13Refusal is the summary of a refused client certificate. Under TLS
// 1.3 the client's handshake is over before the server checks it, so the
// refusal arrives as the server's alert or, when the client writes first, as
// a closed connection, and the provider says which.
const tls13Refusal = `RabbitMQ Refused The Client Certificate|RabbitMQ Closed The TLS Connection`

// TestFaultProvider runs terraform against the second node's management
// API. Over HTTPS with the node's CA and a client certificate it provisions
// and destroys a set, with the password from QUEUEY_PASSWORD and from the
// provider block. Without the client certificate, with one from another CA,
// without the CA, over plain HTTP to the HTTPS port, with a wrong password
// (both ways) or an unknown vhost, apply fails with a diagnostic that says
// which, and creates nothing. No run may show either password in the CLI's
// output, the state or the TRACE log.
func TestFaultProvider(t *testing.T) {
	h := newTFHarness(t)
	prefix := uniquePrefix(t, "tfprov")
	https := "https://localhost:15674"
	wrong := "wrong-" + faultsPassword[:6] + "-pw"
	cases := []struct {
		name, body, vhost string
		env               []string
		want              string // regexp of the diagnostics; "" means apply succeeds
	}{
		{"https+client cert, password from QUEUEY_PASSWORD", providerBody(https, "", "ca.pem", "client.pem", "client-key.pem"), "/", []string{"QUEUEY_PASSWORD=" + faultsPassword}, ""},
		{"https+client cert, password in the provider block", providerBody(https, faultsPassword, "ca.pem", "client.pem", "client-key.pem"), "/", nil, ""},
		{"no client certificate", providerBody(https, faultsPassword, "ca.pem", "", ""), "/", nil, tls13Refusal},
		{"client certificate from another CA", providerBody(https, faultsPassword, "ca.pem", "rogue-client.pem", "rogue-client-key.pem"), "/", nil, tls13Refusal},
		{"server CA not trusted", providerBody(https, faultsPassword, "", "client.pem", "client-key.pem"), "/", nil, `Cannot Verify RabbitMQ's Certificate`},
		{"plain HTTP to the HTTPS port", providerBody("http://127.0.0.1:15674", faultsPassword, "", "", ""), "/", nil, `RabbitMQ Endpoint Expects HTTPS`},
		{"wrong password from QUEUEY_PASSWORD", providerBody(https, "", "ca.pem", "client.pem", "client-key.pem"), "/", []string{"QUEUEY_PASSWORD=" + wrong}, `RabbitMQ Refused The Credentials`},
		{"wrong password in the provider block", providerBody(https, wrong, "ca.pem", "client.pem", "client-key.pem"), "/", nil, `RabbitMQ Refused The Credentials`},
		{"unknown vhost", providerBody(https, faultsPassword, "ca.pem", "client.pem", "client-key.pem"), "no-such-vhost", nil, `(?i)vhost|virtual host`},
	}
	began := time.Now()
	var refusals []string
	searched := 0
	for i, tc := range cases {
		r := h.apply(fmt.Sprintf("run%d", i), tc.body, tc.vhost, prefix, tc.env...)
		diags := r.diagnostics()
		t.Logf("%s: apply err %v; diagnostics %q", tc.name, r.applyErr, diags)
		switch {
		case tc.want == "" && r.applyErr != nil:
			t.Errorf("%s: apply failed: %v\n%s", tc.name, r.applyErr, r.output)
		case tc.want != "" && r.applyErr == nil:
			t.Errorf("%s: apply succeeded", tc.name)
		case tc.want != "" && !regexp.MustCompile(tc.want).MatchString(strings.Join(diags, "\n")):
			t.Errorf("%s: the diagnostics do not match %s: %q", tc.name, tc.want, diags)
		}
		if tc.want != "" {
			if strings.Contains(r.state, prefix) {
				t.Errorf("%s: a refused apply left the set in the state", tc.name)
			}
			refusals = append(refusals, fmt.Sprintf("%s → %s", tc.name, brief(diags)))
		}
		all := r.all()
		searched += len(all)
		for _, pw := range []string{faultsPassword, wrong} {
			if j := strings.Index(all, pw); j >= 0 {
				t.Errorf("%s: a password appears in terraform's output, state or trace log: …%s…", tc.name, all[max(0, j-200):j])
			}
		}
	}
	if qs, err := mgmt(t).ListQueuesIn("/"); err == nil {
		for _, q := range qs {
			if strings.HasPrefix(q.Name, prefix+".") {
				t.Errorf("%s is left on the broker", q.Name)
			}
		}
	}
	took := time.Since(began)
	record(t, row{
		Fault: "provider: TLS with CA and client certificate; wrong credentials, unknown vhost, TLS mismatch",
		Load:  fmt.Sprintf("terraform apply (+ destroy) of a one-queue set: 2 over HTTPS with a client certificate, %d refused", len(refusals)),
		Took:  took,
		Note:  "the HTTPS applies created and destroyed the set; every refusal failed with its diagnostic and created nothing: " + strings.ReplaceAll(strings.Join(refusals, "; "), "|", "/"),
	})
	record(t, row{
		Fault: "provider: no password in output, state or trace log",
		Load:  fmt.Sprintf("the same %d terraform runs at TF_LOG=TRACE, password from QUEUEY_PASSWORD and from the provider block, right and wrong", len(cases)),
		Took:  took,
		Note:  fmt.Sprintf("%.1f MiB of CLI output, state and TRACE log searched for both passwords: not found", float64(searched)/(1<<20)),
	})
}

// brief is a diagnostic's summary and the end of its detail, where the
// underlying error is.
func brief(diags []string) string {
	if len(diags) == 0 {
		return "no diagnostic"
	}
	summary, detail, _ := strings.Cut(diags[0], " — ")
	if len(detail) > 90 {
		detail = "…" + detail[len(detail)-90:]
	}
	return fmt.Sprintf("%q (%s)", summary, detail)
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
