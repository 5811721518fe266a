# hookledger: the two commands are `make run` and `make test` (see README).

.PHONY: run demo test build bench-commit clean mutants release

# The version stamped into the binary (hookledger version prints it): the
# commit from git describe, with -dirty for uncommitted changes. Outside a
# git checkout it is empty and the binary reports the Go toolchain's
# build information instead.
VERSION := $(shell git describe --always --dirty 2>/dev/null)

# make run CONFIG=other.yaml serves another configuration.
CONFIG ?= hookledger.yaml

# make demo DEMO_FLAGS="--listen 127.0.0.1:9090 --no-open" passes flags on.
DEMO_FLAGS ?=

build:
	@echo "building bin/hookledger$(if $(VERSION), $(VERSION)) (the first build compiles every dependency: a minute or two)"
	@go build -ldflags "-X main.version=$(VERSION)" -o bin/hookledger ./cmd/hookledger

# Ctrl-C must reach the server alone: a make that receives the interrupt
# itself ends with status 130 (and an error line if its child died of it)
# even after the server stopped cleanly.
# On a terminal an interactive bash (no rc files) runs the server as a job
# in its own foreground process group and gives the terminal back after it.
run: build
	@echo "starting bin/hookledger serve --config $(CONFIG) (Ctrl-C stops it)"
	@if [ -t 0 ] && command -v bash >/dev/null 2>&1; then \
		exec bash --norc --noprofile -i -c 'bin/hookledger serve --config "$$0"' '$(CONFIG)'; \
	else \
		exec bin/hookledger serve --config '$(CONFIG)'; \
	fi

# make demo plays the recovery dossier against a real server (temporary
# store, built-in fake destination) and keeps it running for the console;
# Ctrl-C stops it. Run it like run, for the same reason.
demo: build
	@echo "starting bin/hookledger demo $(DEMO_FLAGS) (Ctrl-C stops it)"
	@if [ -t 0 ] && command -v bash >/dev/null 2>&1; then \
		exec bash --norc --noprofile -i -c 'bin/hookledger demo $(DEMO_FLAGS)'; \
	else \
		exec bin/hookledger demo $(DEMO_FLAGS); \
	fi

test:
	scripts/test.sh

clean:
	rm -rf bin data dist

# Release builds: static binaries, archives, the container image, SBOMs and
# SHA256SUMS in dist/, built twice and compared byte for byte
# (docs/deploy.md, "Release builds"). RELEASE_VERIFY=0 builds once.
release:
	scripts/release.sh

# The mutation check of the test suite (docs/testing.md); not part of test.
mutants:
	scripts/mutants.sh
