#!/usr/bin/env bash
# Runs every fuzz target of the module for the given time each (default 60s).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-60s}
grep -rl --include='*_test.go' '^func Fuzz' . | while read -r file; do
	pkg=./$(dirname "${file#./}")
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
		echo "== $pkg $target ($fuzztime)"
		go test "$pkg" -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime"
	done
done
