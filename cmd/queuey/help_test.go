package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden help files")

// queuey --help and each subcommand's help are pinned: the usage line, the
// flags and an example each. Run with -update after changing them, and read
// the diff.
func TestHelpGolden(t *testing.T) {
	// Help never shows the environment: defaults resolve at run time.
	t.Setenv("QUEUEY_ENDPOINT", "http://should-not-show:15672")
	t.Setenv("QUEUEY_PASSWORD", "should-not-show")
	for _, args := range [][]string{
		{"--help"},
		{"status", "--help"},
		{"dead", "--help"},
		{"dead", "list", "--help"},
		{"dead", "show", "--help"},
		{"dead", "replay", "--help"},
		{"dead", "purge", "--help"},
	} {
		name := strings.Join(append([]string{"queuey"}, args[:len(args)-1]...), "_")
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(args, &out, &errOut); code != 0 {
				t.Fatalf("queuey %s exited %d: %s", strings.Join(args, " "), code, errOut.String())
			}
			got := out.String()
			for _, part := range []string{"Usage:\n  queuey", "Flags:", "Examples:\n  "} {
				if !strings.Contains(got, part) {
					t.Errorf("help lacks %q", part)
				}
			}
			if strings.Contains(got, "should-not-show") {
				t.Error("help shows a value from the environment")
			}
			path := filepath.Join("testdata", "help", name+".golden")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/queuey -run TestHelpGolden -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("queuey %s differs from %s:\n--- got\n%s\n--- want\n%s", strings.Join(args, " "), path, got, want)
			}
		})
	}
}

// Bad input is a usage error (exit 2) that says what to do, before anything
// connects.
func TestUsageErrors(t *testing.T) {
	t.Setenv("QUEUEY_SET", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dead", "list", "--prefix", "p"}, "--queue is required"},
		{[]string{"dead", "purge", "--prefix", "p", "--queue", "emails"}, "say --all"},
		{[]string{"dead", "list", "--prefix", "p", "--queue", "emails", "--limit", "0"}, "give a positive number"},
		{[]string{"dead", "list", "--prefix", "p", "--queue", "emails", "--older-than", "-1h"}, "negative"},
		{[]string{"dead", "show", "--prefix", "p", "--queue", "emails"}, "show takes one job id"},
		{[]string{"status", "--nope"}, "unknown flag: --nope"},
		{[]string{"status", "--endpoint", "ftp://x"}, "not an http or https URL"},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("queuey %s: exit %d, %q; want exit 2 and %q", strings.Join(tc.args, " "), code, errOut.String(), tc.want)
		}
	}
}
