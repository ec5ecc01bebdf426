// Command queuey operates a queuey queue set: its health (queuey status)
// and its dead letters (queuey dead list, show, replay, purge).
//
//	go install github.com/queuey/terraform-provider-queuey/cmd/queuey@latest
//
// It reaches the broker the way the Terraform provider does, with the same
// QUEUEY_* environment variables, and takes the set from the resource's
// runtime_config (--set, QUEUEY_SET) or from the queues under --prefix.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit status: 0, 1 for an
// error, 2 for a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(stderr, "queuey:", err)
		var ue *usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

// usageError is bad input on the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &options{}
	root := &cobra.Command{
		Use:   "queuey",
		Short: "Operate a queuey queue set on RabbitMQ: its health and its dead letters",
		Long: `queuey operates a queuey queue set on RabbitMQ: it reads the set's health and
lists, replays and purges its dead letters.

It reaches the broker as the Terraform provider does: the management API at
--endpoint with --username and --password, and AMQP at --amqp-url, each also
from the provider's environment variables (QUEUEY_ENDPOINT, QUEUEY_USERNAME,
QUEUEY_PASSWORD, QUEUEY_AMQP_URL). The set is the queuey_queue_set resource's
runtime_config (--set or QUEUEY_SET: the JSON, or a file holding it), or the
queues found under --prefix in --vhost.`,
		Example: `  export QUEUEY_ENDPOINT=http://127.0.0.1:15672 QUEUEY_USERNAME=guest QUEUEY_PASSWORD=guest
  queuey status --prefix myapp`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err.Error()} })
	o.register(root)
	root.AddCommand(newStatusCmd(o), newDeadCmd(o))
	root.CompletionOptions.DisableDefaultCmd = true
	return root
}
