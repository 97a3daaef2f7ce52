# The two commands of the README: `make run` and `make test`.
.PHONY: run test test-huge soak fuzz bench bench-quick bench-copy bench-parse bench-changes bench-filter bench-push bench-citus bench-concurrency build lint fmt openapi screenshots test-qgis qgis-plugin image-check

run:
	scripts/dev.sh

test:
	scripts/test.sh

# 32 clients for a minute, good and bad requests, backends killed every 2 s
# (FEATUREPIPE_SOAK_CLIENTS, FEATUREPIPE_SOAK_SECS, FEATUREPIPE_SOAK_FAULTS=off).
soak:
	scripts/test.sh --test it -- soak --ignored --nocapture

# The pictures of docs/browser.md (docs/img), taken by headless Chromium of
# the pages the browser tests drive.
screenshots:
	scripts/test.sh --test it -- browser::screenshots --ignored

# The GeoJSON fuzz target for FUZZ_SECONDS (default 120) with libFuzzer.
fuzz:
	scripts/fuzz.sh

# The matrix (bench/results.md), what a change feed costs a write, and 32
# clients against one request (bench/concurrency.md).
bench:
	scripts/bench.sh
	scripts/changes-bench.sh
	scripts/concurrency-bench.sh

bench-quick:
	scripts/bench.sh --quick

# 100,000 points at RTT 0, streamed and read whole, against raw COPY (15 rounds).
bench-copy:
	scripts/bench.sh --copy-ratio

bench-parse:
	scripts/bench-parse.sh

# Rows/s written with a change feed on and off (docs/offline-sync.md).
bench-changes:
	scripts/changes-bench.sh

# CQL2 filters over a million rows: indexed, not, and spatial (medians).
bench-filter:
	scripts/filter-bench.sh

# `featurepipe push` with its defaults against the server's own COPY and
# ogr2ogr, 100,000 points at RTT 0 and 50 ms away (docs/push.md; RUNS=5).
bench-push:
	scripts/bench.sh --push

# 20,000 points into a Citus distributed table beside raw binary COPY
# (opt-in: FEATUREPIPE_TEST_CITUS names a coordinator; docs/deploying.md#citus).
bench-citus:
	scripts/citus-bench.sh

# 32 clients × 100 points against one request of the same features, in
# interleaved pairs: medians, spreads and the CPU each part took.
bench-concurrency:
	scripts/concurrency-bench.sh

build:
	cargo build --release

# The whole workspace: the service and the test proxy (crates/latency-proxy).
lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	scripts/check-doc-links.py

fmt:
	cargo fmt --all

# Regenerate the committed OpenAPI document from the code (a test checks they agree).
openapi:
	cargo run --quiet -- openapi > openapi/featurepipe.json

# Real QGIS 3.40, headless in a Debian trixie chroot (made once, cached in
# /var/cache/featurepipe/qgis-trixie), edits and filters a collection (as root).
test-qgis:
	scripts/test-qgis.sh

# The QGIS plugin's ZIP (target/qgis/featurepipe.zip), for QGIS's
# Plugins > Manage and Install Plugins > Install from ZIP (docs/qgis-plugin.md).
qgis-plugin:
	scripts/qgis-plugin.sh

# The Dockerfile built with podman on debootstrapped stand-ins of its base images (cached),
# run against PostGIS here, then docker-compose.yml with podman-compose (as root).
image-check:
	scripts/image-check.sh

# The streaming test of a 500 MB gzip body (tests/it/streaming.rs), in a release build.
test-huge:
	scripts/test.sh --release --test it -- streaming::a_500_mb --ignored --nocapture
