// Package sdklog turns the Terraform plugin SDK's own logs off when nobody
// asked for a Terraform log. Both of the provider's mains call it: the
// released one and bench/profiledprovider, so that a profile measures the
// provider users run.
package sdklog

import "os"

// Vars are the environment variables of the SDK's own logs, which it
// writes at TRACE when they are unset (terraform-plugin-go, -framework).
var Vars = []string{"TF_LOG_SDK", "TF_LOG_SDK_PROTO", "TF_LOG_SDK_FRAMEWORK"}

// asked are the variables that ask for a Terraform log, besides Vars.
var asked = []string{"TF_LOG", "TF_LOG_PROVIDER", "TF_LOG_PATH", "TF_LOG_PROVIDER_QUEUEY"}

// Quiet turns the SDK's logs off unless a Terraform log was asked for:
// without TF_LOG or TF_LOG_PROVIDER, Terraform reads the JSON lines they
// write to stderr and discards them; without them a 200-queue no-change
// plan took 0.80x the wall time (BENCHMARKS.md, "No-change plans"). Any of
// these variables set, by the user or by Terraform, leaves the logs as the
// SDK decides.
func Quiet() {
	for _, v := range append(append([]string(nil), asked...), Vars...) {
		if _, set := os.LookupEnv(v); set {
			return
		}
	}
	for _, v := range Vars {
		_ = os.Setenv(v, "off")
	}
}
