#!/usr/bin/env bash
# Runs every test queuey has: unit tests, integration tests against the real
# broker (build tag "integration"), Terraform acceptance tests (TF_ACC=1) with
# the real Terraform binary, the fault suite (build tag "faults", against a
# second broker node it starts and stops itself) and every fuzz target for
# FUZZTIME (default 60s), plus the static checks CI holds us to and the unit
# tests under the race detector.
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

echo "== unit tests under the race detector"
# No build tags and no TF_ACC: the unit tests of every package, which need
# neither broker nor Terraform.
env -u TF_ACC go test -race -count=1 ./...

echo "== fuzz targets, ${FUZZTIME:-60s} each"
bash scripts/fuzz.sh "${FUZZTIME:-60s}"

echo "== tests (unit, integration, acceptance, faults)"
go build -o bin/testsummary ./tools/testsummary
# One package at a time: on two cores, suites that each load the broker run
# steadier in turn than side by side.
go test -p 1 -tags integration,faults -count=1 -timeout 40m -json ./... 2>&1 | bin/testsummary
