#!/usr/bin/env bash
# Runs every test queuey has: unit tests, integration tests against the real
# broker (build tag "integration") and Terraform acceptance tests (TF_ACC=1)
# with the real Terraform binary, plus the static checks CI holds us to.
#
# It starts what the tests need first, so a missing broker is a failure here,
# never a skipped test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bash scripts/broker.sh
TF_ACC_TERRAFORM_PATH=$(bash scripts/terraform.sh)
export TF_ACC_TERRAFORM_PATH TF_ACC=1
export AMQP_URL="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}"
export QUEUEY_ENDPOINT="${QUEUEY_ENDPOINT:-http://127.0.0.1:15672}"
export QUEUEY_USERNAME="${QUEUEY_USERNAME:-guest}"
export QUEUEY_PASSWORD="${QUEUEY_PASSWORD:-guest}"
# A CLI configuration file that does not exist only makes Terraform warn.
if [ -n "${TF_CLI_CONFIG_FILE:-}" ] && [ ! -e "$TF_CLI_CONFIG_FILE" ]; then
	unset TF_CLI_CONFIG_FILE
fi

echo "== static checks"
unformatted=$(gofmt -l . | grep -v '^bin/' || true)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet -tags integration ./...
bash scripts/docs.sh --check

echo "== tests (unit, integration, acceptance)"
go build -o bin/testsummary ./tools/testsummary
go test -tags integration -count=1 -timeout 30m -json ./... 2>&1 | bin/testsummary
