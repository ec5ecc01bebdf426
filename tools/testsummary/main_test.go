package main

import (
	"strings"
	"testing"
)

func TestRunCountsAndPrintsFailures(t *testing.T) {
	t.Parallel()
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"quiet\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"boom\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestB"}`,
		`{"Action":"skip","Package":"p","Test":"TestC"}`,
		`{"Action":"skip","Package":"q"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t0.1s\n"}`,
		`{"Action":"fail","Package":"p"}`,
	}, "\n")
	var out strings.Builder
	if code := run(strings.NewReader(in), &out); code != 1 {
		t.Fatalf("exit code = %d, want 1", code)
	}
	got := out.String()
	for _, want := range []string{"boom\n", "FAIL\tp\t0.1s\n", "skipped: p TestC\n", "1 passed, 1 failed, 1 skipped\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet") {
		t.Errorf("output of a passing test was printed:\n%s", got)
	}
}

func TestRunFailsWhenNothingRan(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	in := `{"Action":"output","Package":"p","Output":"ok\tp\t0.1s [no tests to run]\n"}`
	if code := run(strings.NewReader(in), &out); code != 1 {
		t.Fatalf("exit code = %d, want 1 when no test ran", code)
	}
}

func TestRunPasses(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	in := `{"Action":"pass","Package":"p","Test":"TestA"}`
	if code := run(strings.NewReader(in), &out); code != 0 {
		t.Fatalf("exit code = %d, want 0:\n%s", code, out.String())
	}
}
