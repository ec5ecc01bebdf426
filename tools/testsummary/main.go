// Command testsummary reads `go test -json` on standard input and prints what
// a person needs from a long run: each package's result line, the output of
// every failed test, the name of every skipped one, and a closing
// "N passed, N failed, N skipped" line.
//
// Its input may be several `go test -json` runs one after the other, each
// announced by a line "== run: LABEL" (scripts/test.sh runs the acceptance
// tests again with other Terraform binaries, and labels each run with the
// binary). It then also prints each run's counts and duration under its label,
// before the closing line, which counts them all.
//
// It exits 1 when a test or a package failed, or when no test ran at all (or
// in one of the runs), so a run that silently tested nothing cannot pass.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// runMarker starts a labelled run in the input.
const runMarker = "== run: "

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	os.Exit(run(os.Stdin, os.Stdout, time.Now))
}

// counts is what one run, or all of them, came to.
type counts struct {
	label                   string
	passed, failed, skipped int
	took                    time.Duration
}

func (c counts) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", c.passed, c.failed, c.skipped)
}

func run(in io.Reader, out io.Writer, now func() time.Time) int {
	var total counts
	var runs []*counts
	var started time.Time
	// cur is the labelled run the events count towards, or nil before the
	// first marker.
	var cur *counts
	count := func(f func(c *counts)) {
		f(&total)
		if cur != nil {
			f(cur)
		}
	}
	endRun := func() {
		if cur != nil {
			cur.took = now().Sub(started)
		}
	}
	failedPkgs := 0
	// Output of each running test, kept until the test ends so that only
	// failures are printed in full.
	pending := map[string]*strings.Builder{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1024*1024), 64*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		if label, ok := strings.CutPrefix(string(line), runMarker); ok {
			endRun()
			cur, started = &counts{label: label}, now()
			runs = append(runs, cur)
			fmt.Fprintln(out, string(line))
			continue
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			// Build errors arrive as plain text, not JSON.
			fmt.Fprintln(out, string(line))
			continue
		}
		key := e.Package + " " + e.Test
		switch {
		case e.Test == "" && e.Action == "output":
			fmt.Fprint(out, e.Output)
		case e.Test == "" && e.Action == "fail":
			failedPkgs++
		case e.Test == "":
			// A package-level skip is a package without tests, which
			// its "[no test files]" line already says.
		case e.Action == "output":
			b := pending[key]
			if b == nil {
				b = &strings.Builder{}
				pending[key] = b
			}
			b.WriteString(e.Output)
		case e.Action == "pass":
			count(func(c *counts) { c.passed++ })
			delete(pending, key)
		case e.Action == "skip":
			count(func(c *counts) { c.skipped++ })
			// A skip is worth a line: the test command must not skip
			// silently what it claims to run.
			fmt.Fprintf(out, "skipped: %s %s\n", e.Package, e.Test)
			delete(pending, key)
		case e.Action == "fail":
			count(func(c *counts) { c.failed++ })
			if b := pending[key]; b != nil {
				fmt.Fprint(out, b.String())
			}
			delete(pending, key)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testsummary: reading go test output:", err)
		return 1
	}
	endRun()
	idle := 0
	for _, r := range runs {
		fmt.Fprintf(out, "%s: %s in %s\n", r.label, r, r.took.Round(time.Second))
		if r.passed == 0 {
			idle++
		}
	}
	fmt.Fprintln(out, total)
	switch {
	case total.failed > 0 || failedPkgs > 0:
		return 1
	case total.passed == 0:
		fmt.Fprintln(out, "testsummary: no test ran")
		return 1
	case idle > 0:
		fmt.Fprintf(out, "testsummary: no test passed in %d of the runs\n", idle)
		return 1
	}
	return 0
}
