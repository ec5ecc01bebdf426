// Command bench measures queuey beside the same work written directly against
// amqp091-go and rabbit-hole, in one process run, against a local RabbitMQ,
// and reports each figure as a ratio to its raw twin.
//
// Every figure is the median of -runs repetitions (-provider-runs for the
// Terraform section). Within a repetition the variants of a section run one
// after another, and the order rotates from one repetition to the next
// (ABAB...), so that load from elsewhere on the machine falls on queuey and
// on its raw twin alike.
//
// Run it from the repository root:
//
//	go run ./bench -out bench/results/latest.md
//
// Everything it declares lives under one prefix, qbench-<random>, and is
// deleted at the end, also after a failure or an interrupt.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

// config holds the flags.
type config struct {
	amqpURL      string
	mgmtURL      string
	user, pass   string
	runs         int
	providerRuns int

	enqueueJobs   int
	pipelinedJobs int
	batchJobs     int
	delayedJobs   int
	workerJobs    int
	lateJobs      int
	lateInterval  time.Duration
	setQueues     int

	only        string
	out         string
	cpuProfile  string
	memProfile  string
	terraform   string
	providerBin string
}

func main() {
	var c config
	flag.StringVar(&c.amqpURL, "amqp", envOr("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "AMQP URL of the broker")
	flag.StringVar(&c.mgmtURL, "mgmt", envOr("RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672"), "management API endpoint")
	flag.StringVar(&c.user, "user", "guest", "management API user")
	flag.StringVar(&c.pass, "password", "guest", "management API password")
	flag.IntVar(&c.runs, "runs", 5, "repetitions of every runtime figure; each figure is their median")
	flag.IntVar(&c.providerRuns, "provider-runs", 5, "repetitions of every provider figure")
	flag.IntVar(&c.enqueueJobs, "enqueue-jobs", 3000, "jobs per run of the enqueue figures")
	flag.IntVar(&c.pipelinedJobs, "pipelined-jobs", 10000, "jobs per run of the 64-caller enqueue figures (a tenth for the serial ones)")
	flag.IntVar(&c.batchJobs, "batch-jobs", 5000, "jobs per run of the batch figures")
	flag.IntVar(&c.delayedJobs, "delayed-jobs", 2000, "jobs per run of the delayed-enqueue figures")
	flag.IntVar(&c.workerJobs, "worker-jobs", 10000, "jobs per run of the worker figures")
	flag.IntVar(&c.lateJobs, "late-jobs", 100, "jobs per run of the lateness figures")
	flag.DurationVar(&c.lateInterval, "late-interval", 10*time.Millisecond, "pause between two delayed jobs of a lateness run")
	flag.IntVar(&c.setQueues, "set-queues", 200, "logical queues of the Terraform queue set (twice as many broker queues)")
	flag.StringVar(&c.only, "only", "", "comma-separated sections to run (enqueue,pipelined,batch,delayed,worker,lateness,provider); default all")
	flag.StringVar(&c.out, "out", "", "also write the report (Markdown) to this file")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.StringVar(&c.memProfile, "memprofile", "", "write a heap profile (see its alloc_objects) at the end of the run to this file")
	flag.StringVar(&c.terraform, "terraform", "", "terraform binary (default: scripts/terraform.sh, then PATH)")
	flag.StringVar(&c.providerBin, "provider-bin", "", "directory holding a built terraform-provider-queuey (default: build one)")
	flag.Parse()
	if c.runs < 1 || c.providerRuns < 1 {
		log.Fatal("bench: -runs and -provider-runs must be at least 1")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, c))
}

func run(ctx context.Context, c config) int {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench: ")
	b, err := newBench(ctx, c)
	if err != nil {
		log.Printf("%v", err)
		return 1
	}
	// Delete everything the bench declared, whatever happens below.
	defer b.cleanup()

	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			log.Printf("%v", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Printf("%v", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	sections := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"enqueue", b.enqueueSection},
		{"pipelined", b.pipelinedSection},
		{"batch", b.batchSection},
		{"delayed", b.delayedSection},
		{"worker", b.workerSection},
		{"lateness", b.latenessSection},
		{"provider", b.providerSection},
	}
	want := map[string]bool{}
	for _, s := range strings.Split(c.only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	b.report.start = time.Now()
	b.report.loadBefore = loadAvg()
	failed := false
	for _, s := range sections {
		if len(want) > 0 && !want[s.name] {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		log.Printf("section %s", s.name)
		t := time.Now()
		if err := s.fn(ctx); err != nil {
			log.Printf("section %s failed: %v", s.name, err)
			b.report.failures = append(b.report.failures, fmt.Sprintf("%s: %v", s.name, err))
			failed = true
		}
		log.Printf("section %s took %s", s.name, time.Since(t).Round(time.Second))
		b.cleanupQueues()
	}
	b.report.took = time.Since(b.report.start)
	if c.memProfile != "" {
		if f, err := os.Create(c.memProfile); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			_ = f.Close()
		}
	}
	b.report.loadAfter = loadAvg()

	md := b.report.markdown(c)
	fmt.Print(md)
	if c.out != "" {
		if err := writeFile(c.out, md); err != nil {
			log.Printf("%v", err)
			return 1
		}
		log.Printf("report written to %s", c.out)
	}
	if failed || ctx.Err() != nil {
		return 1
	}
	return 0
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
