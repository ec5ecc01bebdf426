package brokertest

import (
	"fmt"
	"os/exec"
	"strings"
)

// DefaultCtl is the rabbitmqctl of the local broker of DefaultAMQPURL, the
// host's package that scripts/broker.sh starts.
const DefaultCtl = "rabbitmqctl"

// Ctl runs rabbitmqctl against the broker of FromEnv with args, and returns
// what it printed. QUEUEY_RABBITMQCTL is the command, split at spaces
// (default: DefaultCtl); scripts/test.sh sets it to `scripts/broker4.sh
// ctl` for its RabbitMQ 4.0 pass. For the few tests that must reach inside
// the broker, such as stalling one of its processes (Eval).
func Ctl(args ...string) (string, error) {
	cmd := strings.Fields(EnvOr("QUEUEY_RABBITMQCTL", DefaultCtl))
	out, err := exec.Command(cmd[0], append(cmd[1:], args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", strings.Join(cmd, " "), strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// Eval evaluates the Erlang expressions expr on the broker's node
// (rabbitmqctl eval) and returns the result as the node printed it.
func Eval(expr string) (string, error) { return Ctl("-q", "eval", expr) }
