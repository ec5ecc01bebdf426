package main

import (
	"os"
	"testing"
)

func TestQuietSDK(t *testing.T) {
	unset := func() {
		for _, v := range append([]string{"TF_LOG", "TF_LOG_PROVIDER", "TF_LOG_PATH", "TF_LOG_PROVIDER_QUEUEY"}, sdkLogs...) {
			t.Setenv(v, "") // restored when the test ends
			os.Unsetenv(v)
		}
	}
	unset()
	quietSDK()
	for _, v := range sdkLogs {
		if got := os.Getenv(v); got != "off" {
			t.Errorf("without a Terraform log, %s = %q, want off", v, got)
		}
	}
	unset()
	t.Setenv("TF_LOG", "trace")
	quietSDK()
	for _, v := range sdkLogs {
		if _, set := os.LookupEnv(v); set {
			t.Errorf("with TF_LOG=trace, %s was set to %q; the SDK's logs must stay as asked", v, os.Getenv(v))
		}
	}
}
