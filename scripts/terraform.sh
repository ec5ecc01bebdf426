#!/usr/bin/env bash
# Prints the path of a Terraform binary, building one when none is found.
#
# Order: $TF_ACC_TERRAFORM_PATH, terraform on PATH, /usr/local/bin/terraform,
# then ./bin/terraform, built with `go install` from the Go module proxy
# (about four minutes, once). Nothing is downloaded from elsewhere.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

for candidate in "${TF_ACC_TERRAFORM_PATH:-}" "$(command -v terraform 2>/dev/null || true)" /usr/local/bin/terraform "$root/bin/terraform"; do
	if [ -n "$candidate" ] && [ -x "$candidate" ]; then
		echo "$candidate"
		exit 0
	fi
done

echo "terraform: not found; building v1.5.7 into $root/bin (about four minutes, once)" >&2
mkdir -p "$root/bin"
GOBIN="$root/bin" go install github.com/hashicorp/terraform@v1.5.7 >&2
echo "$root/bin/terraform"
