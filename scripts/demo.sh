#!/usr/bin/env bash
# queuey's main job on a fresh machine: start the broker, build the provider,
# apply the example queue set with Terraform through a local dev override (no
# registry download), show that a second plan has nothing to do, then run the
# end-to-end Go example against the set. Safe to run again and again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

step() { printf '\n== %s\n' "$*"; }

# expect_no_changes fails the demo unless terraform plan, run in the current
# folder, finds nothing to change: the provider and the runtime declared the
# same queues with the same arguments.
expect_no_changes() {
	local code=0
	"$tf" plan -detailed-exitcode -input=false -no-color >"$root/bin/plan.txt" 2>&1 || code=$?
	grep -E 'No changes|Plan:' "$root/bin/plan.txt" || true
	if [ "$code" -ne 0 ]; then
		cat "$root/bin/plan.txt"
		echo "demo: terraform plan after $1 wanted changes (exit $code); see above" >&2
		exit 1
	fi
}

step "broker: make sure RabbitMQ and its management API answer"
bash scripts/broker.sh
tf=$(bash scripts/terraform.sh)

step "provider: build it into bin/ and point Terraform at it"
mkdir -p bin
go build -o bin/terraform-provider-queuey .
cat >bin/dev.tfrc <<TFRC
# Written by scripts/demo.sh: Terraform takes queuey/queuey from this
# repository's build instead of the registry.
provider_installation {
  dev_overrides {
    "queuey/queuey" = "$root/bin"
  }
  direct {}
}
TFRC
export TF_CLI_CONFIG_FILE="$root/bin/dev.tfrc" TF_IN_AUTOMATION=1

cd examples/demo/terraform
step "terraform apply: the queue set aq-example (emails, reports)"
"$tf" apply -auto-approve -input=false -no-color 2>&1 | grep -v -e '^│' -e '^╷' -e '^╵' -e 'Provider development overrides' || true
step "terraform plan right after: nothing to change"
expect_no_changes "the apply"
cd "$root"

step "the end-to-end example: a producer and a worker on aq-example.emails"
go run ./examples/demo

step "terraform plan after the example ran: still nothing to change"
cd examples/demo/terraform
expect_no_changes "the example"

step "a migration: max_priority of aq-example.reports 10 -> 5, with its 3 report jobs inside"
# The plan's count is the management API's, refreshed every 5 s; wait for it
# so that the warning shows the 3 jobs.
for _ in $(seq 1 20); do
	curl -fsS -u guest:guest 'http://127.0.0.1:15672/api/queues/%2F/aq-example.reports' 2>/dev/null | grep -q '"messages":3[,}]' && break
	sleep 0.5
done
"$tf" plan -input=false -no-color -var reports_max_priority=5 >"$root/bin/plan.txt" 2>&1
sed -n '/Warning: Queue Will Be Replaced/,/^$/p;/Warning: Queue Will Be Replaced/,/guide on priority migrations/p' "$root/bin/plan.txt" | sed 's/^[│╷╵] \{0,1\}//' | awk '!seen[$0]++' | head -20
"$tf" apply -auto-approve -input=false -no-color -var reports_max_priority=5 2>&1 | grep -E 'Apply complete|Error' || true
show_reports() {
	rabbitmqctl -q list_queues name messages arguments 2>/dev/null | grep -E '^aq-example\.reports\s' || true
}
echo "the broker now has (name, messages, arguments):"
show_reports
step "and back to 10, so that the next run finds the queue as the example declares it"
"$tf" apply -auto-approve -input=false -no-color 2>&1 | grep -E 'Apply complete|Error' || true
show_reports
expect_no_changes "the migrations"
