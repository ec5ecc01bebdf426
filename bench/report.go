package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// row is one line of the results table.
type row struct {
	section string
	figure  string
	unit    string
	// queuey and raw are medians over the runs; raw is NaN when the figure
	// has no raw twin.
	queuey, raw float64
	rawLabel    string
	// ratio is queuey ÷ raw, NaN when there is none; paired is the median
	// of the per-run ratios, each of two figures measured one right after
	// the other, which load from elsewhere skews less.
	ratio  float64
	paired float64
	target string
	met    string // "yes", "no" or ""
	// all are the per-run values, for the detail table.
	allQ, allR []float64
}

// report is what the bench found.
type report struct {
	rows       []row
	notes      []string
	failures   []string
	broker     string
	brokerCPU  string // how the broker's CPU time is measured, or why not
	terraform  string
	start      time.Time
	took       time.Duration
	loadBefore string
	loadAfter  string
}

// add appends a row comparing metric of variant q with metric of variant r.
// higherBetter says whether the ratio target is a floor (throughput) or a
// ceiling (time); target 0 means none.
func (rep *report) add(s samples, section, figure, unit, q, qMetric, r, rMetric, rawLabel string, higherBetter bool, target float64) {
	rw := row{section: section, figure: figure, unit: unit, rawLabel: rawLabel, raw: math.NaN(), ratio: math.NaN(), paired: math.NaN()}
	rw.allQ = s[q][qMetric]
	rw.queuey = median(rw.allQ)
	if r != "" {
		rw.allR = s[r][rMetric]
		rw.raw = median(rw.allR)
		rw.ratio = rw.queuey / rw.raw
		var per []float64
		for i := range min(len(rw.allQ), len(rw.allR)) {
			per = append(per, rw.allQ[i]/rw.allR[i])
		}
		rw.paired = median(per)
	}
	if target > 0 && !math.IsNaN(rw.ratio) {
		if higherBetter {
			rw.target = fmt.Sprintf("≥ %.3g×", target)
			rw.met = yesNo(rw.ratio >= target)
		} else {
			rw.target = fmt.Sprintf("≤ %.3g×", target)
			rw.met = yesNo(rw.ratio <= target)
		}
	}
	rep.rows = append(rep.rows, rw)
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// median of xs; NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// quantile is the nearest-rank q-quantile of xs (0 < q ≤ 1).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func num(x float64, unit string) string {
	if math.IsNaN(x) {
		return "–"
	}
	switch {
	case unit == "jobs/s" || unit == "msgs/s":
		return fmt.Sprintf("%.0f", x)
	case unit == "requests":
		return fmt.Sprintf("%.0f", x)
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.3g", x)
	}
}

func ratio(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x)
}

func nums(xs []float64, unit string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = num(x, unit)
	}
	return strings.Join(parts, ", ")
}

// markdown renders the report.
func (rep *report) markdown(c config) string {
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	w("## queuey bench, %s\n\n", rep.start.UTC().Format("2006-01-02 15:04 MST"))
	w("- command: `%s`\n", strings.Join(os.Args, " "))
	w("- tree: %s\n", gitState())
	w("- machine: %s\n", machine())
	w("- broker: %s; %s; %s\n", rep.broker, runtime.Version(), rep.terraform)
	w("- broker's CPU time: %s\n", rep.brokerCPU)
	w("- load average (1, 5, 15 min) before: %s; after: %s\n", rep.loadBefore, rep.loadAfter)
	w("- runs: %d per runtime figure, %d per provider figure; each figure is the median; variants rotate order every run\n", c.runs, c.providerRuns)
	w("- sizes: enqueue %d jobs, batch %d, delayed %d, worker %d, lateness %d jobs %s apart, queue set %d queues (%d broker queues)\n",
		c.enqueueJobs, c.batchJobs, c.delayedJobs, c.workerJobs, c.lateJobs, c.lateInterval, c.setQueues, 2*c.setQueues)
	w("- took: %s\n\n", rep.took.Round(time.Second))

	w("\"ratio\" is the median of queuey's figure ÷ the median of its raw twin's, and decides \"met\"; \"paired\" is the median of the per-run ratios.\n\n")
	w("| section | figure | unit | queuey | raw twin | raw | ratio | paired | target | met |\n")
	w("|---|---|---|---:|---|---:|---:|---:|---|---|\n")
	for _, r := range rep.rows {
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.section, r.figure, r.unit, num(r.queuey, r.unit), r.rawLabel, num(r.raw, r.unit), ratio(r.ratio), ratio(r.paired), r.target, r.met)
	}
	if len(rep.notes) > 0 {
		w("\n")
		for _, n := range rep.notes {
			w("- %s\n", n)
		}
	}
	if len(rep.failures) > 0 {
		w("\n**Failures:**\n\n")
		for _, f := range rep.failures {
			w("- %s\n", f)
		}
	}
	w("\n### Every run\n\n| section | figure | queuey, per run | raw, per run |\n|---|---|---|---|\n")
	for _, r := range rep.rows {
		w("| %s | %s | %s | %s |\n", r.section, r.figure, nums(r.allQ, r.unit), nums(r.allR, r.unit))
	}
	return sb.String()
}

// machine describes the host: CPUs, memory, CPU model.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if _, v, ok := strings.Cut(l, ":"); ok {
					model = strings.TrimSpace(v)
				}
				break
			}
		}
	}
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "MemTotal:") {
				_, _ = fmt.Sscanf(strings.TrimPrefix(l, "MemTotal:"), "%d", &kb)
			}
		}
		mem = fmt.Sprintf("%.1f GiB", float64(kb)/1024/1024)
	}
	return fmt.Sprintf("%d CPUs (nproc), %s RAM, %s, %s/%s", runtime.NumCPU(), mem, model, runtime.GOOS, runtime.GOARCH)
}

// gitState names the commit the bench was built from and the files of
// runtime/ and provider/ that differed from it: the bench builds both from
// the working tree.
func gitState() string {
	head, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "not a git checkout"
	}
	st, _ := exec.Command("git", "status", "--porcelain", "--", "runtime", "provider", "main.go").Output()
	var dirty []string
	for _, l := range strings.Split(strings.TrimSpace(string(st)), "\n") {
		if f := strings.TrimSpace(l); f != "" && !strings.HasSuffix(f, "_test.go") {
			dirty = append(dirty, f)
		}
	}
	s := "commit " + strings.TrimSpace(string(head))
	if len(dirty) > 0 {
		s += "; uncommitted changes to non-test files: " + strings.Join(dirty, ", ")
	} else {
		s += ", no uncommitted changes to runtime/ or provider/ code"
	}
	return s
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], ", ")
}

func writeFile(path, s string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
