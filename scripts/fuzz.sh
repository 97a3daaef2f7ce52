#!/usr/bin/env bash
# `make fuzz`: run the GeoJSON fuzz target (fuzz/) for a bounded time
# (FUZZ_SECONDS, default 120) with libFuzzer. cargo-fuzz needs a nightly
# toolchain for its sanitizers; this builds the same target with stable
# rustc and libFuzzer's coverage instrumentation only (no AddressSanitizer:
# the code under test has no unsafe). A crash leaves its input under
# fuzz/artifacts/geojson/: make it a regression test in tests/it/hostile.rs.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${FUZZ_SECONDS:-120}
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
 -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
 -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares \
 -Cdebug-assertions -Coverflow-checks"
# With an explicit target, the flags reach the fuzzed code but not build
# scripts and proc macros (as with cargo-fuzz).
host=$(rustc -vV | sed -n 's/^host: //p')
cargo build --release --bin geojson --target "$host"
mkdir -p corpus/geojson artifacts/geojson
# Seeds: the request bodies of the test suite's hostile corpus and a few good ones.
for f in seeds/*.json; do cp -n "$f" corpus/geojson/ 2>/dev/null || true; done
"./target/$host/release/geojson" corpus/geojson -artifact_prefix=artifacts/geojson/ \
    -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 \
    -dict=geojson.dict
