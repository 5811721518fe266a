# hookledger: the two commands are `make run` and `make test` (see README).

.PHONY: run test build bench-commit clean mutants

run:
	go run ./cmd/hookledger serve --config hookledger.yaml

test:
	scripts/test.sh

build:
	go build -o bin/hookledger ./cmd/hookledger

clean:
	rm -rf bin data

# The mutation check of the test suite (docs/testing.md); not part of test.
mutants:
	scripts/mutants.sh
