#!/usr/bin/env bash
# Runs the benchmark commands against SQLite and a throwaway PostgreSQL and
# prints every figure with its same-run baseline:
#
#   commit   durable commits/s, one row per transaction vs group commit,
#            beside raw fsync/s on the same disk
#   receive  signed webhooks/s through hookledger vs a no-op server, then an
#            account of every acknowledged event in the store
#   pipeline events/s from a preloaded inbox to the effect ledger through
#            the flow engine (one hot entity, 10,000 entities), beside the
#            InboxCommit rate of the same events, then a correctness check
#   e2e      signed webhooks in, effects done at a loopback destination, on
#            SQLite, PostgreSQL with one serve process and with two on one
#            database, all at the same send rate (0.55 of the probed SQLite
#            ingest rate) for 60 s each: effects/s, latency, server RSS and
#            CPU, PostgreSQL transactions and statements per event, then an
#            exactly-once count per event at the destination; a SQLite
#            target sent more than it sustains is given as its capacity
#            against a door probe of the same round (the receive
#            benchmark's SQLite cell), with the writer's time per effect
#            beside the door's per request
#   publish  messages/s through POST /api/v1/messages with an Idempotency-Key
#            and fan-out deliveries/s to ten loopback endpoints with their
#            latency, on SQLite and PostgreSQL, beside signed webhooks into
#            the inbound path of a fresh store of the same kind; three
#            rounds (--rounds 3, unless BENCH_PUBLISH_ARGS says otherwise),
#            since one run's PostgreSQL beside SQLite moves by a fifth
#   bigbody  the serve process's peak RSS while the console shows the largest
#            body the receiver accepts on every page that shows it, beside a
#            2 KB body and the largest body the console pretty-prints
#
# and, when named in BENCH_ONLY (they load stores of a million events, so
# they take long): bulkhead, signals, console, retention and replay (the
# replay verb of every stored event on SQLite stores of 10k, 100k and 1M
# events, to the last work item settled: time per event and the verb's
# peak RSS) (hookledger-bench --help says what each measures).
#
# Extra flags go to commit and receive (e.g. scripts/bench.sh --duration 2s);
# every other benchmark takes its own from BENCH_<NAME>_ARGS, their flags
# differing: BENCH_E2E_ARGS="--duration 20s", BENCH_PUBLISH_ARGS,
# BENCH_PIPELINE_ARGS, BENCH_SIGNALS_ARGS="--events 100000 --effects 100000"...
# BENCH_ONLY="e2e" (a space-separated list) runs only the benchmarks named;
# BENCH_ONLY=all runs every one.
#
# BENCH_TABLE=1 ends the run with the tables of BENCHMARKS.md ("Current
# figures"): one per benchmark run, with the date, the commit and this
# command, ready to replace the rows they regenerate.
#
# The throwaway PostgreSQL preloads pg_stat_statements when the server
# package ships it, so that e2e can count statements per event.
# The PostgreSQL data lives in a temp dir on the same disk as the SQLite
# files and is stopped and removed on exit, whatever happens.
#
# Both binaries are built from a clean export of HEAD, so the figures belong
# to one commit (printed first) and not to whatever is half-edited in the
# working tree; BENCH_WORKTREE=1 builds the working tree instead.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hookledger-bench.XXXXXX")
pgdir=$tmp/pg
cleanup() {
	scripts/pg.sh stop "$pgdir" || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# Build once, before PostgreSQL starts, so that no measurement pays for
# compilation and receive can start its own binary as the no-op server.
src=.
rev="$(git rev-parse --short HEAD) (HEAD)"
if [ "${BENCH_WORKTREE:-}" != 1 ]; then
	src=$tmp/src
	mkdir -p "$src"
	git archive HEAD | tar -x -C "$src"
else
	rev="$(git rev-parse --short HEAD) + working tree changes"
fi
(cd "$src" && go build -o "$tmp/bin/hookledger-bench" ./cmd/hookledger-bench && go build -o "$tmp/bin/hookledger" ./cmd/hookledger)
bindir=$tmp/bin

pgurl=$(scripts/pg.sh start "$pgdir")
# pg_stat_statements must be loaded when the server starts: set it, then
# restart with the options pg.sh started it with (postmaster.opts).
for pgbin in /usr/lib/postgresql/*/bin; do
	[ -x "$pgbin/pg_ctl" ] && break
done
if [ -f "$pgbin/../lib/pg_stat_statements.so" ] && [ -x "$pgbin/psql" ]; then
	run=()
	[ "$(id -u)" = 0 ] && run=(runuser -u postgres --)
	"$pgbin/psql" "$pgurl" -qXc "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'" >/dev/null
	"${run[@]}" "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/server.log" -w -t 60 -m fast restart >/dev/null
else
	echo "bench.sh: no pg_stat_statements in $pgbin/../lib: e2e counts PostgreSQL transactions, not statements" >&2
fi

# A new cluster creates each WAL segment, filled with zeros, the first time
# it writes there; a database in service writes into segments its
# checkpoints recycled. On a new cluster the first PostgreSQL receive cell
# had a p99 of 27-29 ms where later runs on the same cluster had 22-25
# (docs/benchmarks-history.md, "Receive CPU and the routing queue"), so
# about 400 MB of WAL is written and checkpointed once, unmeasured, before
# any benchmark: the figures are the steady state.
if [ -x "$pgbin/psql" ]; then
	"$pgbin/psql" "$pgurl" -qX -c "CREATE TABLE wal_warmup AS SELECT g, repeat('x', 900) AS pad FROM generate_series(1, 400000) g" \
		-c "DROP TABLE wal_warmup" -c "CHECKPOINT" >/dev/null
fi

echo "== machine and code"
echo "commit: $rev"
echo "nproc: $(nproc)"
free -h | awk '/^Mem:/ {print "memory: " $2}'
df -h "${TMPDIR:-/tmp}" | awk 'NR==2 {print "disk: " $1 " " $2 " (" $5 " used), temp dir " $6}'
go version

all="commit receive pipeline e2e publish bulkhead signals console bigbody retention replay"
only="${BENCH_ONLY:-commit receive pipeline e2e publish bigbody}"
[ "$only" = all ] && only=$all
for name in $only; do
	if [[ " $all " != *" $name "* ]]; then
		echo "bench.sh: BENCH_ONLY: unknown benchmark \"$name\" (one of: $all, or all)" >&2
		exit 2
	fi
done
table=()
[ "${BENCH_TABLE:-}" = 1 ] && table=(--table)
log=$tmp/report.log
status=0
for name in $all; do
	[[ " $only " == *" $name "* ]] || continue
	args=()
	case $name in
	commit) args=(--postgres "$pgurl" "$@") ;;
	receive) args=(--postgres "$pgurl" --hookledger "$bindir/hookledger" "$@") ;;
	pipeline | signals | console | retention) args=(--postgres "$pgurl") ;;
	e2e) args=(--postgres "$pgurl" --hookledger "$bindir/hookledger") ;;
	publish)
		args=(--postgres "$pgurl" --hookledger "$bindir/hookledger")
		[ -n "${BENCH_PUBLISH_ARGS:-}" ] || args+=(--rounds 3)
		;;
	bigbody | replay) args=(--hookledger "$bindir/hookledger") ;;
	esac
	own="BENCH_${name^^}_ARGS"
	if [ "$name" != commit ] && [ "$name" != receive ] && [ -n "${!own:-}" ]; then
		# shellcheck disable=SC2206 # BENCH_<NAME>_ARGS is a list of flags
		args+=(${!own})
	fi
	echo
	echo "== $name"
	[ "$name" = e2e ] && echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
	"$bindir/hookledger-bench" "$name" "${args[@]}" "${table[@]}" | tee -a "$log" || status=1
done

if [ ${#table[@]} -gt 0 ]; then
	echo
	echo "== BENCHMARKS.md, \"Current figures\": the tables of this run"
	for name in $all; do
		[[ " $only " == *" $name "* ]] || continue
		# The command that regenerates this table alone: this run's
		# settings for this benchmark.
		own="BENCH_${name^^}_ARGS"
		cmd="BENCH_TABLE=1 BENCH_ONLY=$name"
		[ -n "${!own:-}" ] && cmd+=" $own=\"${!own}\""
		cmd+=" scripts/bench.sh"
		if [ "$name" = commit ] || [ "$name" = receive ]; then
			[ $# -gt 0 ] && cmd+=" $*"
		fi
		echo
		echo "### $name"
		echo
		echo "Measured $(date -u +%Y-%m-%d) at \`${rev%% *}\`$([ "${BENCH_WORKTREE:-}" = 1 ] && echo " with working tree changes"): \`$cmd\`"
		echo
		awk -v mark="<!-- hookledger-bench table: $name -->" '$0 == mark {on = 1; next} /^<!-- end of table -->$/ {on = 0} on' "$log"
		grep -qxF "<!-- hookledger-bench table: $name -->" "$log" || echo "(no table: the benchmark failed before its report)"
	done
fi
exit $status
