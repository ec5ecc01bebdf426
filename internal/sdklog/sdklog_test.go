package sdklog

import (
	"os"
	"testing"
)

func TestQuiet(t *testing.T) {
	unset := func() {
		for _, v := range append(append([]string(nil), asked...), Vars...) {
			t.Setenv(v, "") // restored when the test ends
			os.Unsetenv(v)
		}
	}
	unset()
	Quiet()
	for _, v := range Vars {
		if got := os.Getenv(v); got != "off" {
			t.Errorf("without a Terraform log, %s = %q, want off", v, got)
		}
	}
	for _, ask := range append(append([]string(nil), asked...), Vars[0]) {
		unset()
		t.Setenv(ask, "trace")
		Quiet()
		for _, v := range Vars {
			if v == ask {
				continue
			}
			if _, set := os.LookupEnv(v); set {
				t.Errorf("with %s=trace, %s was set to %q; the SDK's logs must stay as asked", ask, v, os.Getenv(v))
			}
		}
	}
}
