#!/usr/bin/env bash
# The whole test suite: formatting, go vet, staticcheck and go test -race,
# with a throwaway PostgreSQL on a private loopback port so that the store
# conformance suite runs against both SQLite and PostgreSQL. It ends with
# the tests that were skipped, and why. Under CI (CI set, as .ci/run does)
# a test whose dependency is missing fails instead of skipping
# (internal/testdep), and a skip for a missing dependency fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH)/bin"
STATICCHECK_VERSION=v0.8.2

step() { printf '\n== %s\n' "$*"; }

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go') 2>&1 || true)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
echo "ok"

step "go vet"
go vet ./...
echo "ok"

step "go mod tidy"
# go.mod and go.sum say exactly what the code imports: a dependency used
# directly is not marked indirect, and nothing unused is kept.
if ! go mod tidy -diff; then
	echo "go.mod or go.sum is not tidy: run go mod tidy" >&2
	exit 1
fi
echo "ok"

step "staticcheck"
if ! command -v staticcheck >/dev/null 2>&1; then
	echo "installing staticcheck $STATICCHECK_VERSION"
	go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
staticcheck ./...
echo "ok"

step "deploy/ module: go vet, go mod tidy, staticcheck"
# deploy/ is a module of its own (its parsers stay out of the product's
# go.mod; deploy/doc.go says why): ./... above does not reach it.
(cd deploy && go vet ./... && go mod tidy -diff && staticcheck ./...) || {
	echo "deploy/: vet, tidy or staticcheck failed (run go mod tidy in deploy/ if it is not tidy)" >&2
	exit 1
}
echo "ok"

step "mutant list"
# Every entry of scripts/mutants.txt still applies (make mutants runs them).
scripts/mutants.sh --check

step "PostgreSQL"
pgdir=""
tmp=$(mktemp -d /tmp/hookledger-test.XXXXXX)
skipped="$tmp/skipped.txt"
finish() {
	local rc=$?
	if [ -n "$pgdir" ]; then
		scripts/pg.sh stop "$pgdir" || true
		rm -rf "$pgdir"
	fi
	if [ -s "$skipped" ]; then
		step "skipped tests"
		cat "$skipped"
		if [ -n "${CI:-}" ] && grep -q 'for a missing dependency' "$skipped"; then
			echo "under CI no test may skip for a missing dependency: install what the skips above name" >&2
			[ "$rc" -ne 0 ] || rc=1
		fi
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap finish EXIT
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
	pgdir=$(mktemp -d /tmp/hookledger-pgtest.XXXXXX)
	HOOKLEDGER_TEST_POSTGRES=$(scripts/pg.sh start "$pgdir")
	export HOOKLEDGER_TEST_POSTGRES
	echo "throwaway PostgreSQL at ${HOOKLEDGER_TEST_POSTGRES}"
elif [ -n "${CI:-}" ]; then
	echo "PostgreSQL server binaries are missing under CI: install Debian's postgresql package" >&2
	exit 1
else
	echo "!!! PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin:"
	echo "!!! every PostgreSQL test will SKIP. Install Debian's postgresql package to run them."
fi

step "reference Standard Webhooks verifier (npm)"
# The publishing tests check every delivered message with the reference
# JavaScript library, installed from the lockfile (scripts/publish-verify).
if command -v npm >/dev/null 2>&1; then
	npm ci --prefix scripts/publish-verify --no-audit --no-fund --loglevel=error
	echo "ok"
elif [ -n "${CI:-}" ]; then
	echo "node and npm are missing under CI: install Node.js (Debian: nodejs npm)" >&2
	exit 1
else
	echo "!!! npm not found: the publishing tests that run the reference JavaScript verifier will SKIP."
fi

step "go test -race ./..."
# go test -json, made readable again by scripts/testsummary: a line per
# package and the whole output of each failure, as plain go test prints,
# and the skipped tests collected for the end.
go build -o "$tmp/testsummary" ./scripts/testsummary
go test -race -count=1 -timeout 30m -json ./... 2>&1 | "$tmp/testsummary" -skips "$skipped" -conformance "$tmp/conformance.txt"

step "go test ./... in deploy/ (compose, Kubernetes and systemd files)"
(cd deploy && go test -count=1 -json ./... 2>&1) | "$tmp/testsummary" -skips "$skipped.deploy"
if [ -s "$skipped.deploy" ]; then cat "$skipped.deploy" >>"$skipped"; fi

step "deterministic simulation (10,000 seeds)"
go test -count=1 -timeout 30m -run '^TestSimulation' ./internal/sim -seeds=10000 -v

# The suite ran above, under -race; its report is what that run said.
step "store conformance suite, per driver"
cat "$tmp/conformance.txt"
