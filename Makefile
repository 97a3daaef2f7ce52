# The two commands of the README: `make run` and `make test`.
.PHONY: run test bench bench-quick bench-parse build lint fmt openapi

run:
	scripts/dev.sh

test:
	scripts/test.sh

bench:
	scripts/bench.sh

bench-quick:
	scripts/bench.sh --quick

bench-parse:
	cargo bench --bench parse

build:
	cargo build --release

lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

fmt:
	cargo fmt

# Regenerate the committed OpenAPI document from the code (a test checks they agree).
openapi:
	cargo run --quiet -- openapi > openapi/featurepipe.json
