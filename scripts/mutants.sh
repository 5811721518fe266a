#!/usr/bin/env bash
# Mutation check of the test suite: applies each one-line mutation listed in
# scripts/mutants.txt to a copy of the tree, runs the fast tests named for
# it, and reports whether the tests caught it. Every mutant must be caught;
# a survivor means a core invariant that no test would defend.
#
#   scripts/mutants.sh            all mutants
#   scripts/mutants.sh ID...      only these
#
# Exit 0 when every mutant is caught, 1 when one survived, 2 when a mutant
# no longer applies (its line is gone or not unique: update the list).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
root=$(pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/hookledger-mutants.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The copy shares the module and build caches, so each mutant recompiles
# only what it touches.
git ls-files -z | (cd "$root" && xargs -0 tar cf -) | (cd "$work" && tar xf -)

caught=0 survived=0 stale=0
declare -a rows
want=" $* "
while IFS=$'\t' read -r id file from to pkg run; do
	[[ -z "$id" || "$id" == \#* ]] && continue
	[[ $# -gt 0 && "$want" != *" $id "* ]] && continue
	orig=$(mktemp)
	cp "$work/$file" "$orig"
	if ! python3 - "$work/$file" "$from" "$to" <<'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2], sys.argv[3]
src = open(path).read()
n = src.count(old)
if n != 1:
    sys.stderr.write(f"{old!r} occurs {n} times in {path}\n")
    sys.exit(1)
open(path, "w").write(src.replace(old, new))
PY
	then
		stale=$((stale + 1)); rows+=("STALE     $id ($file)")
		rm -f "$orig"; continue
	fi
	start=$SECONDS
	# A mutant that makes a test hang is caught by the timeout.
	out=$( (cd "$work" && go test -count=1 -timeout 5m -run "$run" "$pkg") 2>&1 )
	rc=$?
	took=$((SECONDS - start))
	if [ $rc -eq 0 ]; then
		survived=$((survived + 1)); rows+=("SURVIVED  $id ($file; go test -run '$run' $pkg, ${took}s)")
	elif grep -qE '\[build failed\]|^# ' <<<"$out" && ! grep -q -- '--- FAIL' <<<"$out"; then
		stale=$((stale + 1)); rows+=("NO BUILD  $id ($file): the mutant does not compile; fix the list")
	else
		caught=$((caught + 1)); rows+=("caught    $id (${took}s)")
	fi
	cp "$orig" "$work/$file"; rm -f "$orig"
done < scripts/mutants.txt

printf '%s\n' "${rows[@]}"
echo "mutants: $caught caught, $survived survived, $stale stale"
[ "$stale" -gt 0 ] && exit 2
[ "$survived" -gt 0 ] && exit 1
exit 0
