//go:build integration

package main

// End-to-end tests: the built queuey binary against the broker, for a
// healthy set, a set whose hold queue does not drain, and a set with dead
// letters.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey/terraform-provider-queuey/internal/brokertest"
	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// queueyBin builds the command once per test run.
func queueyBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "queuey-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "queuey")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("go build ./cmd/queuey: %v", buildErr)
	}
	return binPath
}

// cli runs the binary with the broker's settings in the environment, as an
// operator's shell would have them, and returns stdout; a non-zero exit
// fails the test.
func cli(t *testing.T, b *brokertest.Broker, args ...string) string {
	t.Helper()
	out, errOut, err := cliRun(t, b, args...)
	if err != nil {
		t.Fatalf("queuey %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

func cliRun(t *testing.T, b *brokertest.Broker, args ...string) (string, string, error) {
	t.Helper()
	env := brokertest.FromEnv()
	cmd := exec.Command(queueyBin(t), args...)
	cmd.Env = append(os.Environ(),
		"QUEUEY_ENDPOINT="+env.Endpoint, "QUEUEY_USERNAME="+env.Username, "QUEUEY_PASSWORD="+env.Password,
		"QUEUEY_AMQP_URL="+b.AMQPURL, "QUEUEY_SET=")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// statusEventually runs status until its output has every one of want: the
// management API refreshes counts every few seconds.
func statusEventually(t *testing.T, b *brokertest.Broker, want ...string) string {
	t.Helper()
	var out string
	eventually(t, func() (bool, string) {
		out = cli(t, b, "status", "--prefix", b.Prefix)
		for _, w := range want {
			if !strings.Contains(out, w) {
				return false, fmt.Sprintf("queuey status never said %q; last output:\n%s", w, out)
			}
		}
		return true, ""
	})
	return out
}

// eventually calls try every second until it reports done, and fails the
// test with try's last complaint after 45 s.
func eventually(t *testing.T, try func() (done bool, complaint string)) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		done, complaint := try()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(complaint)
		}
		time.Sleep(time.Second)
	}
}

type e2eJob struct {
	N int `json:"n"`
}

func (e2eJob) Kind() string  { return "e2e.fail" }
func (e2eJob) Queue() string { return "jobs" }

func TestCLIStatusHealthySet(t *testing.T) {
	b := brokertest.New(t, "cli")
	ctx := context.Background()
	set := queuey.QueueSet{Prefix: b.Prefix, Queues: []queuey.QueueConfig{{Name: "jobs"}, {Name: "mail", MaxPriority: queuey.NoPriority}}}
	workers := queuey.NewWorkers()
	queuey.AddWorker(workers, queuey.WorkFunc[e2eJob](func(context.Context, *queuey.Job[e2eJob]) error { return nil }))
	pool, err := queuey.NewWorkerPool(ctx, b.AMQPURL, set, workers, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- pool.Run(runCtx) }()
	defer func() { stop(); <-done }()

	out := statusEventually(t, b, "health: ok")
	for _, q := range []string{b.Name("jobs") + " ", b.Name("jobs") + ".dead", b.Name("mail") + " ", b.Name("mail") + ".dead"} {
		if !strings.Contains(out, q) {
			t.Errorf("status lacks a row for %q:\n%s", q, out)
		}
	}
	if !strings.Contains(out, "QUEUE  ") || !strings.Contains(out, "CONSUMERS") {
		t.Errorf("status lacks its table header:\n%s", out)
	}
	var r struct {
		Healthy bool `json:"healthy"`
		Queues  map[string][]struct {
			Queue     string `json:"queue"`
			Role      string `json:"role"`
			Consumers int    `json:"consumers"`
		} `json:"queues"`
	}
	// The management API shows a new consumer only at its next stats
	// refresh (every 5 s): a healthy, empty set may report none before it.
	eventually(t, func() (bool, string) {
		if err := json.Unmarshal([]byte(cli(t, b, "status", "--prefix", b.Prefix, "--json")), &r); err != nil {
			t.Fatal(err)
		}
		ok := r.Healthy && len(r.Queues["jobs"]) == 2 && r.Queues["jobs"][0].Role == "work" && r.Queues["jobs"][0].Consumers == 1
		return ok, fmt.Sprintf("status --json = %+v for 45 s, want healthy with jobs's work queue consumed once", r)
	})
	t.Logf("healthy set:\n%s", out)
}

func TestCLIStatusHoldQueueNotDraining(t *testing.T) {
	b := brokertest.New(t, "cli")
	ctx := context.Background()
	set := queuey.QueueSet{Prefix: b.Prefix, Queues: []queuey.QueueConfig{{Name: "jobs"}}}
	p, err := queuey.NewProducer(ctx, b.AMQPURL, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 3 {
		if _, err := p.Enqueue(ctx, "jobs", "e2e.fail", e2eJob{N: i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A hold queue of an hour whose oldest message went in two hours ago:
	// the broker should have released it an hour ago.
	work := b.Name("jobs")
	hold := topology.HoldName(work, 3600000)
	ch, err := b.Dial().Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(hold, true, false, false, false, topology.HoldArgs(work, 3600000)); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(ctx, "", hold, true, false, amqp.Publishing{Timestamp: time.Now().Add(-2 * time.Hour), Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	out := statusEventually(t, b,
		"health: needs attention",
		"jobs: nothing consumes the work queue: 3 jobs waiting",
		"jobs: hold queue not draining: "+hold+" holds 1, the oldest for 2 h, past its delay of 1h",
	)
	if !strings.Contains(out, hold) {
		t.Errorf("status lacks the hold queue's row:\n%s", out)
	}
	t.Logf("hold queue not draining:\n%s", out)
}

func TestCLIDeadLetters(t *testing.T) {
	b := brokertest.New(t, "cli")
	ctx := context.Background()
	set := queuey.QueueSet{Prefix: b.Prefix, Queues: []queuey.QueueConfig{{Name: "jobs"}}}
	workers := queuey.NewWorkers()
	queuey.AddWorker(workers, queuey.WorkFunc[e2eJob](func(context.Context, *queuey.Job[e2eJob]) error {
		return queuey.JobFatal(errors.New("card declined"))
	}))
	pool, err := queuey.NewWorkerPool(ctx, b.AMQPURL, set, workers, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := queuey.NewProducer(ctx, b.AMQPURL, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 12 {
		if _, err := p.Enqueue(ctx, "jobs", "e2e.fail", e2eJob{N: i}, &queuey.EnqueueOptions{CorrelationID: "order-7"}); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- pool.Run(runCtx) }()
	ch, err := b.Dial().Channel()
	if err != nil {
		t.Fatal(err)
	}
	dead := b.Name("jobs") + ".dead"
	deadline := time.Now().Add(30 * time.Second)
	for {
		q, err := ch.QueueDeclarePassive(dead, true, false, false, false, nil)
		if err == nil && q.Messages == 12 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("12 dead letters never arrived: %+v %v", q, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	<-done

	out := statusEventually(t, b, "jobs: dead letters waiting: 12, oldest ")
	t.Logf("set with dead letters:\n%s", out)

	// list, in words and as JSON; the set from runtime_config this time.
	cfg, err := json.Marshal(set.RuntimeConfig("/"))
	if err != nil {
		t.Fatal(err)
	}
	text := cli(t, b, "dead", "list", "--set", string(cfg), "--queue", "jobs")
	if !strings.Contains(text, "12 shown, 12 in the queue") || !strings.Contains(text, "fatal error: card declined") || !strings.Contains(text, "e2e.fail") {
		t.Fatalf("dead list:\n%s", text)
	}
	var page struct {
		Letters []struct {
			JobID         string `json:"job_id"`
			Kind          string `json:"kind"`
			Reason        string `json:"reason"`
			Attempts      int    `json:"attempts"`
			CorrelationID string `json:"correlation_id"`
			DeadAt        string `json:"dead_lettered_at"`
		} `json:"dead_letters"`
		Total int `json:"total"`
	}
	if err := json.Unmarshal([]byte(cli(t, b, "dead", "list", "--prefix", b.Prefix, "--queue", "jobs", "--json", "--limit", "5")), &page); err != nil {
		t.Fatal(err)
	}
	l := page.Letters
	if page.Total != 12 || len(l) != 5 || l[0].Kind != "e2e.fail" || l[0].Reason != "fatal error: card declined" || l[0].Attempts != 1 || l[0].CorrelationID != "order-7" || l[0].DeadAt == "" {
		t.Fatalf("dead list --json = %+v", page)
	}

	show := cli(t, b, "dead", "show", "--prefix", b.Prefix, "--queue", "jobs", l[0].JobID)
	for _, w := range []string{l[0].JobID, "fatal error: card declined", "order-7", `{"n":`} {
		if !strings.Contains(show, w) {
			t.Fatalf("dead show lacks %q:\n%s", w, show)
		}
	}
	if _, errOut, err := cliRun(t, b, "dead", "show", "--prefix", b.Prefix, "--queue", "jobs", "00000000-0000-0000-0000-000000000000"); err == nil || !strings.Contains(errOut, "no dead letter with job id") {
		t.Fatalf("dead show of an unknown id: %v %s", err, errOut)
	}

	var res struct {
		Seen int `json:"seen"`
		Done int `json:"done"`
	}
	if err := json.Unmarshal([]byte(cli(t, b, "dead", "replay", "--prefix", b.Prefix, "--queue", "jobs", "--id", l[0].JobID+","+l[1].JobID, "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Done != 2 || res.Seen != 12 {
		t.Fatalf("dead replay --id: %+v, want 2 of 12", res)
	}
	work, err := ch.QueueDeclarePassive(b.Name("jobs"), true, false, false, false, nil)
	if err != nil || work.Messages != 2 {
		t.Fatalf("work queue after the replay: %+v %v, want 2", work, err)
	}
	if out := cli(t, b, "dead", "replay", "--prefix", b.Prefix, "--queue", "jobs", "--kind", "other.kind"); !strings.Contains(out, "replayed 0 of 10") {
		t.Fatalf("a replay of another kind: %s", out)
	}
	if out := cli(t, b, "dead", "purge", "--prefix", b.Prefix, "--queue", "jobs", "--all"); !strings.Contains(out, "purged 10 of 10") {
		t.Fatalf("dead purge --all: %s", out)
	}
	statusEventually(t, b, "jobs: nothing consumes the work queue: 2 jobs waiting")
}

// An endpoint may list a cluster's nodes, as the provider's does: the first
// that answers is used, here after a node that refuses connections.
func TestCLIEndpointListSkipsANodeThatIsDown(t *testing.T) {
	b := brokertest.New(t, "clilist")
	set := queuey.QueueSet{Prefix: b.Prefix, Queues: []queuey.QueueConfig{{Name: "jobs"}}}
	p, err := queuey.NewProducer(context.Background(), b.AMQPURL, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	env := brokertest.FromEnv()
	out := cli(t, b, "--endpoint", "http://127.0.0.1:1,"+env.Endpoint, "status", "--prefix", b.Prefix)
	if !strings.Contains(out, b.Name("jobs")+" ") {
		t.Errorf("status through the second endpoint lacks %s:\n%s", b.Name("jobs"), out)
	}
}
