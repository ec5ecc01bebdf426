// Command terraform-provider-queuey serves the queuey Terraform provider.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/queuey/terraform-provider-queuey/provider"
)

// version is set by the release build through -ldflags.
var version = "dev"

func main() {
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
