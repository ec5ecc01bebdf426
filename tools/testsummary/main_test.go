package main

import (
	"strings"
	"testing"
	"time"
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
	if code := run(strings.NewReader(in), &out, time.Now); code != 1 {
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
	if code := run(strings.NewReader(in), &out, time.Now); code != 1 {
		t.Fatalf("exit code = %d, want 1 when no test ran", code)
	}
}

func TestRunPasses(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	in := `{"Action":"pass","Package":"p","Test":"TestA"}`
	if code := run(strings.NewReader(in), &out, time.Now); code != 0 {
		t.Fatalf("exit code = %d, want 0:\n%s", code, out.String())
	}
}

// fakeClock advances a minute on every reading.
func fakeClock() func() time.Time {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		t = t.Add(time.Minute)
		return t
	}
}

func TestRunCountsEachLabelledRun(t *testing.T) {
	t.Parallel()
	in := strings.Join([]string{
		`== run: Terraform v1.11.4 (/usr/local/bin/terraform): every package`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"pass","Package":"p","Test":"TestB"}`,
		`{"Action":"skip","Package":"p","Test":"TestC"}`,
		`== run: OpenTofu v1.12.6 (/cache/tofu): acceptance tests`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
	}, "\n")
	var out strings.Builder
	if code := run(strings.NewReader(in), &out, fakeClock()); code != 0 {
		t.Fatalf("exit code = %d, want 0:\n%s", code, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"== run: OpenTofu v1.12.6 (/cache/tofu): acceptance tests\n",
		"Terraform v1.11.4 (/usr/local/bin/terraform): every package: 2 passed, 0 failed, 1 skipped in 1m0s\n",
		"OpenTofu v1.12.6 (/cache/tofu): acceptance tests: 1 passed, 0 failed, 0 skipped in 1m0s\n",
		"3 passed, 0 failed, 1 skipped\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if !strings.HasSuffix(got, "3 passed, 0 failed, 1 skipped\n") {
		t.Errorf("the closing line is not the total:\n%s", got)
	}
}

func TestRunFailsWhenOneRunTestedNothing(t *testing.T) {
	t.Parallel()
	in := strings.Join([]string{
		`== run: Terraform v1.11.4: every package`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`== run: Terraform v1.5.7: acceptance tests`,
		`{"Action":"output","Package":"p","Output":"ok\tp\t0.1s [no tests to run]\n"}`,
	}, "\n")
	var out strings.Builder
	if code := run(strings.NewReader(in), &out, fakeClock()); code != 1 {
		t.Fatalf("exit code = %d, want 1 when one run tested nothing:\n%s", code, out.String())
	}
}
