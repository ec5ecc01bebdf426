#!/usr/bin/env bash
# Runs every fuzz target of the module for the given time each (default 60s).
#
# Go 1.26's fuzz coordinator can fail a target with a bare "context deadline
# exceeded" when -fuzztime runs out while a worker is mid-input (go.dev/issue/75804,
# fixed in Go 1.27). Such a run wrote no failing input. A failure counts here
# when the run wrote a failing input under testdata/fuzz, or failed with
# anything else; the known race alone is reported and passed over.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-60s}
status=0
while read -r file; do
	dir=$(dirname "${file#./}")
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
		echo "== ./$dir $target ($fuzztime)"
		corpus="$dir/testdata/fuzz/$target"
		before=$(ls "$corpus" 2>/dev/null | sort || true)
		log=$(mktemp)
		if go test "./$dir" -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" 2>&1 | tee "$log"; then
			rm -f "$log"
			continue
		fi
		after=$(ls "$corpus" 2>/dev/null | sort || true)
		if [ "$before" = "$after" ] && grep -q '^    context deadline exceeded$' "$log" && [ "$(grep -c -e '--- FAIL' "$log")" -eq 1 ]; then
			echo "fuzz: $target stopped on Go's fuzztime race (go.dev/issue/75804) and wrote no failing input: not a failure"
		else
			echo "fuzz: $target FAILED; a failing input, if any, is under $corpus"
			status=1
		fi
		rm -f "$log"
	done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort)
exit $status
