#!/usr/bin/env bash
# Mutation check of the test suite: applies each one-line mutation listed in
# scripts/mutants.txt to a copy of the tree, runs the fast tests named for
# it, and reports whether the tests caught it. Every mutant must be caught;
# a survivor means a core invariant that no test would defend.
#
#   scripts/mutants.sh            all mutants
#   scripts/mutants.sh ID...      only these
#   scripts/mutants.sh --check    only check that every entry applies
#   scripts/mutants.sh --count    print how many mutants the list holds
#   scripts/mutants.sh --list     print each mutant: id, file, package, tests
#
# Before any test runs, every entry asked for must apply: its original text
# must occur exactly once in its file. Exit 0 when every mutant is caught,
# 1 when one survived, 2 when an entry does not apply (each is named: update
# its line), an ID is unknown, a mutant does not compile, or its tests
# could not run for a missing dependency (under CI they fail for it, which
# says nothing of the mutant).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
list=scripts/mutants.txt

usage() { sed -n '7,11s/^#   //p' "$0" >&2; exit 2; }

mode=run
case "${1:-}" in
--count | --list | --check)
	mode=${1#--}
	[ $# -eq 1 ] || usage
	shift
	;;
-*) usage ;;
esac

# entries checks the list (every entry, or the IDs given) against the tree
# at $1 and prints the selected entries, one per line, TAB-separated as in
# the list. Every problem is reported on stderr, and then it fails (exit
# 2): an entry without its six fields or with an empty one, an ID twice,
# an ID asked for that the list lacks, a file that is gone, an original
# text that does not occur exactly once. (Plain bash: make test runs it
# on machines without python.)
entries() {
	local root=$1
	shift
	local -A want=() seen=()
	local id line tabs file from src rest k n=0
	local -a f problems=() out=()
	for id in "$@"; do want[$id]=1; done
	while IFS= read -r line || [ -n "$line" ]; do
		n=$((n + 1))
		[[ -z "${line//[[:space:]]/}" || $line == \#* ]] && continue
		tabs=${line//[^$'\t']/}
		if [ ${#tabs} -ne 5 ]; then
			problems+=("$list:$n: $((${#tabs} + 1)) TAB-separated fields, want 6 (id, file, original, replacement, package, tests)")
			continue
		fi
		if [[ $line == $'\t'* || $line == *$'\t' || $line == *$'\t\t'* ]]; then
			problems+=("$list:$n: an empty field (a mutant replaces text with other text)")
			continue
		fi
		IFS=$'\t' read -r -a f <<<"$line"
		id=${f[0]} file=${f[1]} from=${f[2]}
		[ -n "${seen[$id]:-}" ] && problems+=("$list:$n: $id: the id is used twice")
		seen[$id]=1
		[[ $# -gt 0 && -z "${want[$id]:-}" ]] && continue
		if [ ! -f "$root/$file" ]; then
			problems+=("STALE  $id ($list:$n): $file does not exist")
			continue
		fi
		src=
		IFS= read -r -d '' src <"$root/$file" || true
		rest=${src//"$from"/}
		k=$(((${#src} - ${#rest}) / ${#from}))
		if [ "$k" -ne 1 ]; then
			problems+=("STALE  $id ($list:$n): its original text occurs $k times in $file, want once: $from")
			continue
		fi
		out+=("$line")
	done <"$list"
	for id in "$@"; do
		[ -n "${seen[$id]:-}" ] || problems+=("$id: no such mutant in $list")
	done
	if [ ${#problems[@]} -gt 0 ]; then
		printf '%s\n' "${problems[@]}" >&2
		echo "${#problems[@]} problem(s) in $list: no test was run" >&2
		return 2
	fi
	[ ${#out[@]} -eq 0 ] || printf '%s\n' "${out[@]}"
}

# The list as written, whether or not it applies.
case $mode in
count)
	awk -F'\t' '!/^#/ && NF { n++ } END { print n + 0 }' "$list"
	exit 0
	;;
list)
	awk -F'\t' '!/^#/ && NF { printf "%s\t%s\t%s\t%s\n", $1, $2, $5, $6 }' "$list"
	exit 0
	;;
check)
	selected=$(entries .) || exit 2
	echo "every mutant applies: $(grep -c . <<<"$selected") in $list"
	exit 0
	;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/hookledger-mutants.XXXXXX")
pgdir=""
cleanup() {
	if [ -n "$pgdir" ]; then
		scripts/pg.sh stop "$pgdir" >/dev/null 2>&1 || true
		rm -rf "$pgdir"
	fi
	rm -rf "$work"
}
trap cleanup EXIT
# Some mutants are caught only on PostgreSQL (what SQLite stores as given,
# PostgreSQL refuses), so their tests must not skip it: a throwaway server
# is started as make test starts one, unless one is named already. CI is
# set, so that a test missing a dependency fails (NOT RUN below) rather
# than skip and let a mutant survive unseen.
export CI=${CI:-true}
if [ -z "${HOOKLEDGER_TEST_POSTGRES:-}" ] && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
	pgdir=$(mktemp -d /tmp/hookledger-pgmutants.XXXXXX)
	HOOKLEDGER_TEST_POSTGRES=$(scripts/pg.sh start "$pgdir") || { echo "could not start PostgreSQL for the mutants' tests" >&2; exit 2; }
	export HOOKLEDGER_TEST_POSTGRES
elif [ -n "${HOOKLEDGER_TEST_POSTGRES:-}" ] && command -v psql >/dev/null 2>&1; then
	# A server named but down fails every PostgreSQL test, and each of
	# their mutants would count as caught.
	psql "$HOOKLEDGER_TEST_POSTGRES" -qAtc 'SELECT 1' >/dev/null 2>&1 \
		|| { echo "the PostgreSQL that HOOKLEDGER_TEST_POSTGRES names does not answer" >&2; exit 2; }
fi
# The copy is the working tree as it is, files not yet committed included
# (ignored ones left out). It shares the module and build caches, so each
# mutant recompiles only what it touches.
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | (cd "$work" && tar xf -)
# Checked on the copy, before any test runs.
selected=$(entries "$work" "$@") || exit 2

caught=0 survived=0 nobuild=0 notrun=0
declare -a rows
while IFS=$'\t' read -r id file from to pkg run; do
	[ -n "$id" ] || continue
	orig=$(mktemp)
	cp "$work/$file" "$orig"
	src=
	IFS= read -r -d '' src <"$work/$file" || true
	printf '%s' "${src/"$from"/"$to"}" >"$work/$file"
	start=$SECONDS
	# A mutant that makes a test hang is caught by the timeout.
	out=$( (cd "$work" && go test -count=1 -timeout 5m -run "$run" "$pkg") 2>&1)
	rc=$?
	took=$((SECONDS - start))
	if [ $rc -eq 0 ]; then
		survived=$((survived + 1))
		rows+=("SURVIVED  $id ($file; go test -run '$run' $pkg, ${took}s)")
	elif grep -qE '\[build failed\]|^# ' <<<"$out" && ! grep -q -- '--- FAIL' <<<"$out"; then
		nobuild=$((nobuild + 1))
		rows+=("NO BUILD  $id ($file): the mutant does not compile; fix the list")
	elif grep -q 'MISSING DEPENDENCY: ' <<<"$out"; then
		# Under CI a test without its dependency fails (internal/testdep):
		# that failure says nothing of the mutant.
		notrun=$((notrun + 1))
		rows+=("NOT RUN   $id: $(grep -m1 -o 'MISSING DEPENDENCY: .*' <<<"$out")")
	else
		caught=$((caught + 1))
		rows+=("caught    $id (${took}s)")
	fi
	cp "$orig" "$work/$file"
	rm -f "$orig"
done <<<"$selected"

printf '%s\n' "${rows[@]}"
echo "mutants: $caught caught, $survived survived, $nobuild do not compile, $notrun could not run their tests"
[ $((nobuild + notrun)) -gt 0 ] && exit 2
[ "$survived" -gt 0 ] && exit 1
exit 0
