// Command testsummary reads `go test -json` on standard input and prints what
// a person needs from a long run: each package's result line, the output of
// every failed test, the name of every skipped one, and a closing
// "N passed, N failed, N skipped" line.
//
// It exits 1 when a test or a package failed, or when no test ran at all, so
// a run that silently tested nothing cannot pass.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	os.Exit(run(os.Stdin, os.Stdout))
}

func run(in io.Reader, out io.Writer) int {
	var passed, failed, skipped int
	failedPkgs := 0
	// Output of each running test, kept until the test ends so that only
	// failures are printed in full.
	pending := map[string]*strings.Builder{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1024*1024), 64*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
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
			passed++
			delete(pending, key)
		case e.Action == "skip":
			skipped++
			// A skip is worth a line: the test command must not skip
			// silently what it claims to run.
			fmt.Fprintf(out, "skipped: %s %s\n", e.Package, e.Test)
			delete(pending, key)
		case e.Action == "fail":
			failed++
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
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	switch {
	case failed > 0 || failedPkgs > 0:
		return 1
	case passed == 0:
		fmt.Fprintln(out, "testsummary: no test ran")
		return 1
	}
	return 0
}
