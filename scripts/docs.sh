#!/usr/bin/env bash
# Regenerates docs/ from the provider schema, templates/ and examples/ with
# tfplugindocs, offline, using the local Terraform binary. With --check it
# fails when the committed docs/ differ from what the generator writes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

tf=$(bash scripts/terraform.sh)
# tfplugindocs builds the provider and asks Terraform for its schema. It uses
# the terraform it finds on PATH and downloads nothing; without one on PATH it
# would try to download one, which fails offline.
export PATH="$(dirname "$tf"):$PATH"
# main.go's go:generate line runs tfplugindocs with the provider's name.
if ! out=$(go generate . 2>&1); then
	echo "$out" >&2
	echo "docs: tfplugindocs failed (see above)" >&2
	exit 1
fi
if [ "${1:-}" = "--check" ]; then
	if ! git diff --exit-code --stat -- docs/ || [ -n "$(git status --porcelain -- docs/)" ]; then
		echo "docs: docs/ is not current; run 'make docs' and commit the result" >&2
		exit 1
	fi
fi
