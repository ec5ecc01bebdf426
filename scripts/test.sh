#!/usr/bin/env bash
# Runs every test queuey has: unit tests, integration tests against the real
# broker (build tag "integration"), Terraform acceptance tests (TF_ACC=1) with
# the real Terraform binary, the fault suite (build tag "faults", against a
# second broker node it starts and stops itself) and every fuzz target for
# FUZZTIME (default 60s), plus the static checks CI holds us to, the unit
# tests under the race detector and a check that the release builds. The
# integration, acceptance, migration and demo tests run against RabbitMQ 3.10
# (Debian's) and again against RabbitMQ 4.0 (scripts/broker4.sh); the
# acceptance tests run again with the oldest Terraform queuey supports and
# with OpenTofu (scripts/terraform.sh builds them once into ~/.cache/queuey).
# The fault suite runs on 3.10 alone: it breaks a node of its own made from
# the host's package (scripts/fault-broker.sh). The cluster tests run in the
# first pass, against a three-node 4.0.5 cluster (scripts/cluster.sh) whose
# nodes they stop and restart.
#
# It starts what the tests need first, so a missing broker is a failure here,
# never a skipped test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bash scripts/broker.sh
# RabbitMQ 4.0.5 beside it, and a second 4.0.5 node that refuses transient
# queues as 4.3 does by default, for the tests of that refusal.
bash scripts/broker4.sh start
bash scripts/broker4.sh start strict
# A three-node 4.0.5 cluster, for the tests that stop its nodes (they take
# /tmp/queuey-cluster.lock themselves).
bash scripts/cluster.sh start
TF_ACC_TERRAFORM_PATH=$(bash scripts/terraform.sh)
export TF_ACC_TERRAFORM_PATH TF_ACC=1
oldest=$(bash scripts/terraform.sh oldest)
tofu=$(bash scripts/terraform.sh tofu)
export AMQP_URL="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}"
export QUEUEY_ENDPOINT="${QUEUEY_ENDPOINT:-http://127.0.0.1:15672}"
export QUEUEY_USERNAME="${QUEUEY_USERNAME:-guest}"
export QUEUEY_PASSWORD="${QUEUEY_PASSWORD:-guest}"
# Where scripts/broker4.sh's nodes are (`scripts/broker4.sh env [strict]`).
rmq4=(amqp://guest:guest@127.0.0.1:5680/ http://127.0.0.1:15680)
# The rabbitmqctl of the 4.0 node, for the tests that reach inside the broker
# (brokertest.Ctl; the host's rabbitmqctl reaches 3.10).
ctl4="bash $root/scripts/broker4.sh ctl"
export QUEUEY_STRICT_AMQP_URL=amqp://guest:guest@127.0.0.1:5681/ QUEUEY_STRICT_ENDPOINT=http://127.0.0.1:15681
# Where the cluster is (QUEUEY_CLUSTER_*, not exported): the "every
# package" pass alone is given it, so that its cluster tests run once.
eval "$(bash scripts/cluster.sh env)"
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
(cd bench/peers && go vet ./...) # a module of its own: river and asynq stay out of queuey's
bash scripts/docs.sh --check

echo "== unit tests under the race detector"
# No build tags and no TF_ACC: the unit tests of every package, which need
# neither broker nor Terraform.
env -u TF_ACC go test -race -count=1 ./...

echo "== release: cross-compile every platform of .goreleaser.yml, check the registry manifest"
go run ./tools/releasecheck

echo "== fuzz targets, ${FUZZTIME:-60s} each"
bash scripts/fuzz.sh "${FUZZTIME:-60s}"

echo "== tests (unit, integration, acceptance, faults) on RabbitMQ 3.10; integration, acceptance, migration and demo on 4.0; acceptance with Terraform 1.5.7 and OpenTofu"
go build -o bin/testsummary ./tools/testsummary
version() { curl -fsS -u "$QUEUEY_USERNAME:$QUEUEY_PASSWORD" "$1/api/overview" | sed -n 's/.*"rabbitmq_version":"\([^"]*\)".*/\1/p'; }
# gotest BINARY AMQP_URL ENDPOINT WHAT ARGS...: a go test -json run with that
# Terraform binary against that broker, announced to testsummary, which
# counts and times each run under its label.
gotest() {
	echo "== run: $(CHECKPOINT_DISABLE=1 "$1" version 2>/dev/null | sed -n 1p) ($1), RabbitMQ $(version "$3") ($2): $4"
	TF_ACC_TERRAFORM_PATH=$1 AMQP_URL=$2 QUEUEY_AMQP_URL=$2 QUEUEY_ENDPOINT=$3 go test -p 1 -count=1 -json "${@:5}" 2>&1
}
# One package at a time: on two cores, suites that each load the broker run
# steadier in turn than side by side. OpenTofu resolves the provider's source
# to its own registry's host.
{
	rc=0
	rmq3=("$AMQP_URL" "$QUEUEY_ENDPOINT")
	QUEUEY_CLUSTER_AMQP_URL=$QUEUEY_CLUSTER_AMQP_URL QUEUEY_CLUSTER_AMQP_URLS=$QUEUEY_CLUSTER_AMQP_URLS QUEUEY_CLUSTER_ENDPOINTS=$QUEUEY_CLUSTER_ENDPOINTS \
		gotest "$TF_ACC_TERRAFORM_PATH" "${rmq3[@]}" "every package" -tags integration,faults -timeout 40m ./... || rc=1
	QUEUEY_RABBITMQCTL=$ctl4 gotest "$TF_ACC_TERRAFORM_PATH" "${rmq4[@]}" "integration, acceptance, migration and demo tests" \
		-tags integration -timeout 40m ./runtime/... ./provider/... ./examples/... || rc=1
	gotest "$oldest" "${rmq3[@]}" "acceptance tests" -run '^TestAcc' -timeout 20m ./provider/ || rc=1
	TF_ACC_PROVIDER_HOST=registry.opentofu.org TF_ACC_PROVIDER_NAMESPACE=queuey \
		gotest "$tofu" "${rmq3[@]}" "acceptance tests" -run '^TestAcc' -timeout 20m ./provider/ || rc=1
	exit $rc
} | bin/testsummary
