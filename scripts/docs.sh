#!/usr/bin/env bash
# Regenerates docs/ from the provider schema, templates/ and examples/ with
# tfplugindocs, offline, using the local Terraform binary. With --check it
# fails when the committed docs/ differ from what the generator writes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [ ! -d templates ] || [ ! -d provider ] || ! grep -q tfplugindocs go.mod; then
	echo "docs: the provider or tfplugindocs is not set up yet; nothing to generate" >&2
	[ "${1:-}" = "--check" ] && exit 0
	exit 1
fi

tf=$(bash scripts/terraform.sh)
# tfplugindocs builds the provider and asks Terraform for its schema. Without
# --tf-version it uses the terraform it finds on PATH and downloads nothing.
export PATH="$(dirname "$tf"):$PATH"
go tool tfplugindocs generate --provider-name queuey >/dev/null 2>&1 || {
	echo "docs: tfplugindocs failed; rerun 'go tool tfplugindocs generate --provider-name queuey' to see why" >&2
	exit 1
}
if [ "${1:-}" = "--check" ]; then
	if ! git diff --exit-code --stat -- docs/ || [ -n "$(git status --porcelain -- docs/)" ]; then
		echo "docs: docs/ is not current; run 'make docs' and commit the result" >&2
		exit 1
	fi
fi
