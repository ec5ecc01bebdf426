package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The figures, in the order of the report.
const (
	figSerial  = "enqueue, 1 caller"
	figCallers = "enqueue, many callers"
	figBulk    = "bulk enqueue"
	figDrain   = "drain a backlog"
	figLate    = "delay lateness"
	figRetry   = "retry after 1 s, round trip"
)

// errUnsupported is what a system returns for a figure it has no API for.
var errUnsupported = errors.New("not supported")

// payload is every job's arguments, the same bytes for every system: a
// sequence number and, for a delayed job, when it was meant to run.
type payload struct {
	Seq int   `json:"seq"`
	At  int64 `json:"at,omitempty"` // Unix nanoseconds
}

// probe is what a handler reports to the figure under way. Every system's
// handler calls run with the job's payload and whether this is its first
// attempt, and returns what run returns.
type probe struct {
	mu     sync.Mutex
	mode   int
	first  map[int]time.Time
	durs   []time.Duration
	count  atomic.Int64
	target int64
	done   chan struct{}
}

const (
	modeCount = iota // count the job
	modeLate         // record how late it started
	modeRetry        // fail the first attempt; record the second's delay
)

// errFirstAttempt is the failure of a retry figure's first attempt.
var errFirstAttempt = errors.New("first attempt fails on purpose")

// arm readies p for target jobs of mode.
func (p *probe) arm(mode, target int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.target = mode, int64(target)
	p.first = map[int]time.Time{}
	p.durs = nil
	p.count.Store(0)
	p.done = make(chan struct{})
}

func (p *probe) run(pl payload, firstAttempt bool) error {
	now := time.Now()
	p.mu.Lock()
	mode := p.mode
	switch mode {
	case modeLate:
		p.durs = append(p.durs, now.Sub(time.Unix(0, pl.At)))
	case modeRetry:
		if firstAttempt {
			p.first[pl.Seq] = now
			p.mu.Unlock()
			return errFirstAttempt
		}
		if t, ok := p.first[pl.Seq]; ok {
			p.durs = append(p.durs, now.Sub(t))
		}
	}
	done := p.done
	p.mu.Unlock()
	if p.count.Add(1) == p.target {
		close(done)
	}
	return nil
}

// wait blocks until the armed number of jobs is done, or timeout passes.
func (p *probe) wait(ctx context.Context, timeout time.Duration) ([]time.Duration, error) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
	case <-time.After(timeout):
		return nil, fmt.Errorf("%d of %d jobs done after %v", p.count.Load(), p.target, timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.durs), nil
}

// concurrently calls f for i in [0, n) from callers goroutines and returns
// the rate, or the first error.
func concurrently(n, callers int, f func(i int) error) (float64, error) {
	var next atomic.Int64
	errs := make(chan error, callers)
	start := time.Now()
	for range callers {
		go func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					errs <- nil
					return
				}
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var first error
	for range callers {
		if err := <-errs; err != nil && first == nil {
			first = err
			next.Store(int64(n)) // stop the others
		}
	}
	return float64(n) / time.Since(start).Seconds(), first
}

// spaced calls f for i in [0, n), 20 ms apart.
func spaced(n int, f func(i int) error) error {
	for i := range n {
		if err := f(i); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(min(i, len(s))-1, 0)]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func selected(only, key string) bool {
	return only == "" || slices.Contains(strings.Split(only, ","), key)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

// column is one system's figures over every run.
type column struct {
	name, settings string
	rates          map[string][]float64
	durs           map[string][]time.Duration // every job of every run
}

// report is what the run found.
type report struct {
	config                config
	columns               []*column
	start                 time.Time
	took                  time.Duration
	loadBefore, loadAfter string
}

func (r *report) markdown() string {
	var b strings.Builder
	c := r.config
	fmt.Fprintf(&b, "## queuey and its peers, %s\n\n", r.start.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- runs: %d; rates are medians of the runs, lateness and round trips percentiles over every job of every run\n", c.runs)
	fmt.Fprintf(&b, "- load average (1, 5, 15 min) before: %s; after: %s; took %s\n", r.loadBefore, r.loadAfter, r.took.Round(time.Second))
	fmt.Fprintf(&b, "- sizes: 1 caller %d jobs; %d callers %d jobs; bulk %d; drain %d at concurrency %d; %d jobs delayed %v, 20 ms apart; %d retries\n\n",
		c.serialJobs, c.callers, c.callerJobs, c.bulkJobs, c.drainJobs, c.concurrency, c.lateJobs, c.delay, c.retryJobs)
	b.WriteString("| figure |")
	for _, col := range r.columns {
		fmt.Fprintf(&b, " %s |", col.name)
	}
	b.WriteString("\n|---|")
	for range r.columns {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	rateRow := func(label, fig string) {
		fmt.Fprintf(&b, "| %s |", label)
		for _, col := range r.columns {
			if v, ok := col.rates[fig]; ok {
				fmt.Fprintf(&b, " %s |", thousands(median(v)))
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
	rateRow("enqueue, 1 caller, jobs/s", figSerial)
	rateRow(fmt.Sprintf("enqueue, %d callers, jobs/s", c.callers), figCallers)
	rateRow(fmt.Sprintf("bulk enqueue of %s, jobs/s", thousands(float64(c.bulkJobs))), figBulk)
	rateRow(fmt.Sprintf("drain %s with concurrency %d, jobs/s", thousands(float64(c.drainJobs)), c.concurrency), figDrain)
	durRow := func(label, fig string, ps ...int) {
		fmt.Fprintf(&b, "| %s |", label)
		for _, col := range r.columns {
			var parts []string
			for _, p := range ps {
				parts = append(parts, ms(percentile(col.durs[fig], p)))
			}
			fmt.Fprintf(&b, " %s |", strings.Join(parts, " / "))
		}
		b.WriteString("\n")
	}
	durRow(fmt.Sprintf("%v delay, lateness p50 / p99, ms", c.delay), figLate, 50, 99)
	durRow("retry after 1 s, round trip p50 / p99, ms", figRetry, 50, 99)
	b.WriteString("\nSettings:\n\n")
	for _, col := range r.columns {
		fmt.Fprintf(&b, "- **%s**: %s\n", col.name, col.settings)
	}
	b.WriteString("\n### Every run\n\n| system | figure | per run |\n|---|---|---|\n")
	for _, col := range r.columns {
		for _, fig := range []string{figSerial, figCallers, figBulk, figDrain} {
			if v, ok := col.rates[fig]; ok {
				var s []string
				for _, x := range v {
					s = append(s, thousands(x))
				}
				fmt.Fprintf(&b, "| %s | %s | %s |\n", col.name, fig, strings.Join(s, ", "))
			}
		}
	}
	return b.String()
}

func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	if v >= 100 {
		return thousands(v)
	}
	return fmt.Sprintf("%.1f", v)
}

// thousands formats v rounded, with commas.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
