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
#   e2e      signed webhooks in at 0.55 of the probed ingest rate for 60 s,
#            effects done at a loopback destination, latency, server RSS,
#            then an exactly-once count per event at the destination
#
# Extra flags go to commit and receive (e.g. scripts/bench.sh --duration 2s);
# pipeline and e2e run with their defaults (their flags differ).
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

echo "== machine and code"
echo "commit: $rev"
echo "nproc: $(nproc)"
free -h | awk '/^Mem:/ {print "memory: " $2}'
df -h "${TMPDIR:-/tmp}" | awk 'NR==2 {print "disk: " $1 " " $2 " (" $5 " used), temp dir " $6}'
go version

status=0
echo
echo "== commit"
"$bindir/hookledger-bench" commit --postgres "$pgurl" "$@" || status=1
echo
echo "== receive"
"$bindir/hookledger-bench" receive --postgres "$pgurl" --hookledger "$bindir/hookledger" "$@" || status=1
echo
echo "== pipeline"
"$bindir/hookledger-bench" pipeline --postgres "$pgurl" || status=1
echo
echo "== e2e"
"$bindir/hookledger-bench" e2e --hookledger "$bindir/hookledger" || status=1
exit $status
