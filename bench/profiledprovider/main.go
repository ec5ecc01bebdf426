// Command profiledprovider is terraform-provider-queuey with a CPU profile:
// when QUEUEY_CPUPROFILE names a file, the provider process writes a pprof
// CPU profile of its lifetime there, and its CPU time (user and system) in
// the same name with ".cpu" appended, when Terraform stops it. It
// exists to measure the provider's own share of a plan (BENCHMARKS.md,
// "No-change plans"); build it with
// `go build -o DIR/terraform-provider-queuey ./bench/profiledprovider` and
// point a dev override at DIR. It turns the SDK's logs off as the
// released main does (internal/sdklog); a profile of the SDK's logging
// needs TF_LOG_SDK=trace.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/queuey/terraform-provider-queuey/internal/sdklog"
	"github.com/queuey/terraform-provider-queuey/provider"
)

func main() {
	sdklog.Quiet() // as the released main does
	if path := os.Getenv("QUEUEY_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		stop := func() {
			pprof.StopCPUProfile()
			f.Close()
			// The process's own CPU time beside the profile, since
			// Terraform's rusage of its children folds it in.
			var ru syscall.Rusage
			if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
				cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
				_ = os.WriteFile(path+".cpu", []byte(cpu.String()+"\n"), 0o644)
			}
		}
		defer stop()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		go func() { <-sig; stop(); os.Exit(0) }()
	}
	err := providerserver.Serve(context.Background(), provider.New("dev"), providerserver.ServeOpts{
		Address: "registry.terraform.io/queuey/queuey",
	})
	if err != nil {
		log.Print(err.Error())
	}
}
