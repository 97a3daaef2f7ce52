# The two commands of the README: `make run` and `make test`.
.PHONY: run test build lint fmt

run:
	scripts/dev.sh

test:
	scripts/test.sh

build:
	cargo build --release

lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

fmt:
	cargo fmt
