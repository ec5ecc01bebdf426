#!/usr/bin/env bash
# Prints the path of a Terraform (or OpenTofu) binary, building it when needed.
#
#   scripts/terraform.sh                the current Terraform: $TF_ACC_TERRAFORM_PATH,
#                                       else terraform on PATH, else /usr/local/bin/terraform,
#                                       else the newest Terraform release, built
#   scripts/terraform.sh oldest         the oldest Terraform queuey supports, v1.5.7,
#                                       whatever is on PATH (also any vX.Y.Z)
#   scripts/terraform.sh tofu           OpenTofu v1.12.6 (also tofu vX.Y.Z)
#
# A build goes into the cache directory ($QUEUEY_CACHE, default
# ~/.cache/queuey), once: a second run finds it and costs nothing. It comes
# from the Go module proxy only. `go install` refuses OpenTofu and Terraform
# after 1.5 (their go.mod has replace directives), so every build downloads
# the module, copies it somewhere writable and builds inside the copy: about
# four minutes for Terraform 1.5.7 and for OpenTofu 1.12.6 on two cores.
set -euo pipefail
name=terraform
if [ "${1:-}" = tofu ]; then
	name=tofu
	shift
fi
version="${1:-}"
if [ "$version" = oldest ]; then version=v1.5.7; fi

if [ "$name" = terraform ] && [ -z "$version" ]; then
	for candidate in "${TF_ACC_TERRAFORM_PATH:-}" "$(command -v terraform 2>/dev/null || true)" /usr/local/bin/terraform; do
		if [ -n "$candidate" ] && [ -x "$candidate" ]; then
			echo "$candidate"
			exit 0
		fi
	done
	version=latest
fi

case "$name" in
terraform) module=github.com/hashicorp/terraform pkg=. ;;
tofu) module=github.com/opentofu/opentofu pkg=./cmd/tofu version="${version:-v1.12.6}" ;;
esac
cache="${QUEUEY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/queuey}"
# "latest" is the newest release when it was first built: terraform-latest
# links to its directory, so a second run asks the proxy nothing either.
bin="$cache/$name-$version/$name"
if [ -x "$bin" ]; then
	readlink -f "$bin"
	exit 0
fi

# Outside any module, so that the caller's go.mod plays no part.
info=$(cd "${TMPDIR:-/tmp}" && go mod download -json "$module@$version")
field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p" <<<"$info"; }
resolved=$(field Version)
dir=$(field Dir)
bin="$cache/$name-$resolved/$name"
if [ ! -x "$bin" ]; then
	[ -d "$dir" ] || { echo "$name: go mod download gave no directory for $module@$version" >&2; exit 1; }
	echo "$name: building $resolved into $cache (about four minutes, once)" >&2
	src="$cache/$name-$resolved.src"
	mkdir -p "$(dirname "$bin")" # also makes $cache on a fresh machine
	rm -rf "$src"
	cp -r "$dir" "$src"
	chmod -R u+w "$src"
	# Built under another name and renamed, so that an interrupted build
	# never leaves a binary the check above would take for a finished one.
	(cd "$src" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$bin.tmp" "$pkg") >&2
	mv "$bin.tmp" "$bin"
	rm -rf "$src"
fi
if [ "$version" = latest ]; then
	ln -sfn "$name-$resolved" "$cache/$name-latest"
fi
echo "$bin"
