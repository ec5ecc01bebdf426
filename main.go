// Command terraform-provider-queuey serves the queuey Terraform provider.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/queuey/terraform-provider-queuey/internal/sdklog"
	"github.com/queuey/terraform-provider-queuey/provider"
)

// Regenerate docs/ from templates/, examples/ and the schema's descriptions.
// It builds the provider and asks the terraform binary on PATH for the
// schema; nothing is downloaded.
//go:generate go tool tfplugindocs generate --provider-name queuey --rendered-provider-name queuey

// version is set by the release build through -ldflags.
var version = "dev"

func main() {
	sdklog.Quiet() // before the SDK reads its log settings
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
