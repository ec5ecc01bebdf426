//go:build faults

package faults

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	queuey "github.com/queuey/terraform-provider-queuey/runtime"
	"github.com/queuey/terraform-provider-queuey/runtime/topology"
)

// poisonJob kills the worker process that runs it, as an out-of-memory
// kill, a kill -9 or a crash in cgo would.
type poisonJob struct {
	Seq int `json:"seq"`
}

func (poisonJob) Kind() string  { return "fault.poison" }
func (poisonJob) Queue() string { return "jobs" }

// crashChildEnv, set in a child's environment, makes TestMain run the
// crash-loop worker (crashLoopChild) instead of the suite.
const crashChildEnv = "QUEUEY_FAULTS_CRASH_CHILD"

// The poison job's policy: it must be dead-lettered after exactly this
// many runs. The good jobs get more, so that the attempts they lose by
// being in flight in a worker that dies (which count too) do not
// dead-letter them.
const poisonAttempts, goodAttempts = 3, 10

func crashSet(prefix string) queuey.QueueSet {
	return queuey.QueueSet{Prefix: prefix, Queues: []queuey.QueueConfig{{Name: "jobs", Prefetch: 8}}}
}

// crashLoopChild is one worker process of TestFaultCrashLoopIsDeadLettered:
// a pool over the set the parent named, which appends a line per run to
// files in the parent's directory (runs of the poison job, then os.Exit(3);
// successes of good jobs) and stops gracefully on SIGINT.
func crashLoopChild() int {
	prefix, dir := os.Getenv("QUEUEY_CRASH_PREFIX"), os.Getenv("QUEUEY_CRASH_DIR")
	appendLine := func(name, line string) {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		_, _ = f.WriteString(line + "\n")
		_ = f.Sync()
		_ = f.Close()
	}
	ws := queuey.NewWorkers()
	queuey.AddWorker(ws, queuey.WorkFunc[poisonJob](func(_ context.Context, j *queuey.Job[poisonJob]) error {
		appendLine("poison-runs", fmt.Sprintf("%d %d", os.Getpid(), j.Attempt))
		os.Exit(3)
		return nil
	}))
	queuey.AddWorker(ws, queuey.WorkFunc[faultJob](func(_ context.Context, j *queuey.Job[faultJob]) error {
		time.Sleep(5 * time.Millisecond)
		appendLine("handled", fmt.Sprintf("%d %d", j.Args.Seq, j.Attempt))
		return nil
	}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := logger(os.Stderr)
	pool, err := queuey.NewWorkerPool(ctx, amqpURL(), crashSet(prefix), ws, &queuey.WorkerOptions{
		Logger:           log,
		Retry:            &queuey.RetryPolicy{Strategy: queuey.RetryFixed, Base: 200 * time.Millisecond, MaxAttempts: goodAttempts},
		RetryByKind:      map[string]queuey.RetryPolicy{poisonJob{}.Kind(): {Strategy: queuey.RetryFixed, Base: 200 * time.Millisecond, MaxAttempts: poisonAttempts}},
		RetryGranularity: 100 * time.Millisecond,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: NewWorkerPool:", err)
		return 2
	}
	if err := pool.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child: Run:", err)
		return 2
	}
	return 0
}

// TestFaultCrashLoopIsDeadLettered: a job whose handler kills its worker
// process (os.Exit(3)), with a policy of 3 attempts, among 200 good jobs of
// the same queue, consumed by one worker process at a time, each started
// when the last one died. The poison job must run exactly 3 times, at
// attempts 1, 2 and 3, then be in the dead-letter queue with a reason that
// says its worker died during it 3 times; every good job must be handled.
// Before issue 18 the job ran at attempt 1 in every process, forever.
func TestFaultCrashLoopIsDeadLettered(t *testing.T) {
	const good, poisonAt = 200, 40
	const maxProcesses = 8 // the loop the test must not see
	prefix := uniquePrefix(t, "crash")
	set := crashSet(prefix)
	dir := t.TempDir()
	prod := newProducer(t, amqpURL(), set, &queuey.ProducerOptions{Logger: quiet(&logBuffer{})})
	ctx := context.Background()
	published, confirmed := 0, 0
	var poisonID string
	for seq := range good + 1 {
		var err error
		var id string
		switch {
		case seq == poisonAt:
			id, err = queuey.EnqueueJob(ctx, prod, poisonJob{Seq: seq}, nil)
			poisonID = id
		case seq > poisonAt:
			_, err = queuey.EnqueueJob(ctx, prod, faultJob{Seq: seq - 1}, nil)
		default:
			_, err = queuey.EnqueueJob(ctx, prod, faultJob{Seq: seq}, nil)
		}
		published++
		if err != nil {
			t.Fatalf("enqueue %d: %v", seq, err)
		}
		confirmed++
	}

	read := func(name string) []string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		var lines []string
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		return lines
	}
	handled := func() (distinct, dups, afterDeath int) {
		seen := map[int]bool{}
		for _, line := range read("handled") {
			var seq, attempt int
			if _, err := fmt.Sscanf(line, "%d %d", &seq, &attempt); err != nil {
				t.Fatalf("handled line %q: %v", line, err)
			}
			if seen[seq] {
				dups++
			}
			seen[seq] = true
			if attempt > 1 {
				afterDeath++ // the good jobs fail no attempt on their own
			}
		}
		return len(seen), dups, afterDeath
	}
	dead := func() int {
		q, err := mgmt(t).GetQueue("/", set.DeadQueue("jobs"))
		if err != nil {
			return 0
		}
		return q.Messages
	}

	began := time.Now()
	var stderr bytes.Buffer
	processes, died := 0, 0
	done := false
	deadline := time.Now().Add(2 * time.Minute)
	for !done && processes < maxProcesses && time.Now().Before(deadline) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"=1", "QUEUEY_CRASH_PREFIX="+prefix, "QUEUEY_CRASH_DIR="+dir)
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		processes++
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		for {
			select {
			case err := <-exited:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 3 {
					t.Fatalf("worker process %d ended with %v, want exit status 3 from the poison job\n%s", processes, err, stderr.String())
				}
				died++
			case <-time.After(100 * time.Millisecond):
				if n, _, _ := handled(); n == good && dead() >= 1 {
					done = true
					_ = cmd.Process.Signal(os.Interrupt)
					if err := <-exited; err != nil {
						t.Errorf("the last worker process did not stop cleanly: %v\n%s", err, stderr.String())
					}
				} else if time.Now().Before(deadline) {
					continue
				} else {
					_ = cmd.Process.Kill()
					<-exited
				}
			}
			break
		}
	}
	took := time.Since(began)

	runs := read("poison-runs")
	var attempts []string
	for _, r := range runs {
		attempts = append(attempts, strings.Fields(r)[1])
	}
	if len(runs) != poisonAttempts || strings.Join(attempts, ",") != "1,2,3" {
		t.Errorf("the poison job ran %d times at attempts %v in %d worker processes, want exactly %d, at 1,2,3", len(runs), attempts, processes, poisonAttempts)
	}
	if died != poisonAttempts {
		t.Errorf("%d worker processes died, want %d", died, poisonAttempts)
	}

	// The dead letter: the poison job, with why and after how many.
	var reason string
	var deadAttempts int64
	func() {
		ac, err := amqp.Dial(amqpURL())
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer ac.Close()
		ch, err := ac.Channel()
		if err != nil {
			t.Fatal(err)
		}
		for {
			d, ok, err := ch.Get(set.DeadQueue("jobs"), true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if d.MessageId != poisonID {
				t.Errorf("unexpected dead letter %s: %v", d.MessageId, d.Headers[topology.HeaderDeathReason])
				continue
			}
			reason, _ = d.Headers[topology.HeaderDeathReason].(string)
			deadAttempts, _ = d.Headers[topology.HeaderAttempts].(int64)
		}
	}()
	wantReason := fmt.Sprintf("worker died during the job %d times", poisonAttempts)
	if !strings.Contains(reason, wantReason) || deadAttempts != poisonAttempts {
		t.Errorf("poison job's dead letter: reason %q, x-attempts %d; want a reason with %q and %d attempts", reason, deadAttempts, wantReason, poisonAttempts)
	}
	n, dups, afterDeath := handled()
	lost := good - n
	if reason == "" {
		lost++ // the poison job is neither handled nor dead-lettered
	}
	// The redeliveries of good jobs the pools counted as attempts: they
	// were in flight in a process when the poison job killed it.
	goodCounted := 0
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, "redelivered unsettled") && strings.Contains(line, "job_type="+faultJob{}.Kind()) {
			goodCounted++
		}
	}
	record(t, row{
		Fault: "crash loop: a job whose handler kills its worker process (os.Exit(3))",
		Load: fmt.Sprintf("1 poison job with max attempts %d among %d good jobs (max attempts %d) on one queue, prefetch 8, one worker process at a time, restarted when it dies",
			poisonAttempts, good, goodAttempts),
		Published: published, Confirmed: confirmed, Handled: n, Lost: lost, Dups: dups, Took: took,
		Note: fmt.Sprintf("poison job ran %d times (attempts %s) in %d processes, %d died; dead-lettered: %q; %d redeliveries of good jobs in flight in a dying process counted as attempts, %d good jobs handled at a later attempt for it",
			len(runs), strings.Join(attempts, ","), processes, died, reason, goodCounted, afterDeath),
	})
}
