// Command terraform-provider-queuey serves the queuey Terraform provider.
package main

import (
	"context"
	"flag"
	"log"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/queuey/terraform-provider-queuey/provider"
)

// Regenerate docs/ from templates/, examples/ and the schema's descriptions.
// It builds the provider and asks the terraform binary on PATH for the
// schema; nothing is downloaded.
//go:generate go tool tfplugindocs generate --provider-name queuey --rendered-provider-name queuey

// version is set by the release build through -ldflags.
var version = "dev"

// sdkLogs are the environment variables of the SDK's own logs, which it
// writes at TRACE when they are unset (terraform-plugin-go, -framework).
var sdkLogs = []string{"TF_LOG_SDK", "TF_LOG_SDK_PROTO", "TF_LOG_SDK_FRAMEWORK"}

// quietSDK turns the SDK's logs off unless a Terraform log was asked for:
// without TF_LOG or TF_LOG_PROVIDER, Terraform reads the JSON lines they
// write to stderr and discards them; without them a 200-queue no-change
// plan took 0.80x the wall time (BENCHMARKS.md, "No-change plans"). Any of
// these variables set, by the user or by Terraform, leaves the logs as the
// SDK decides.
func quietSDK() {
	for _, v := range append([]string{"TF_LOG", "TF_LOG_PROVIDER", "TF_LOG_PATH", "TF_LOG_PROVIDER_QUEUEY"}, sdkLogs...) {
		if _, set := os.LookupEnv(v); set {
			return
		}
	}
	for _, v := range sdkLogs {
		_ = os.Setenv(v, "off")
	}
}

func main() {
	quietSDK()
	var debug bool
	flag.BoolVar(&debug, "debug", false, "run the provider with support for debuggers like delve")
	flag.Parse()

	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: "registry.terraform.io/queuey/queuey",
		Debug:   debug,
	})
	if err != nil {
		log.Fatal(err.Error())
	}
}
