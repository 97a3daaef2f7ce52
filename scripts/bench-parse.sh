#!/usr/bin/env bash
# `make bench-parse`: criterion's parse + validate + encode benchmark (one
# core), then each function's median as MB/s. The median, because the machine
# is shared: a neighbour's burst moves criterion's mean, not its median. The
# serde_json syntax-only pass over the same body runs beside it as a reference.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --bench parse -- "$@"
bytes=$(sed -n 's/.*"throughput":{"Bytes":\([0-9]*\).*/\1/p' \
    "target/criterion/parse_validate_encode/10k points/new/benchmark.json")
median_ms() {
    # estimates.json: {"mean":{...},"median":{"confidence_interval":{...},"point_estimate":NS,...},...}
    sed -n 's/.*"median":{[^}]*}[^}]*"point_estimate":\([0-9.e+-]*\).*/\1/p' \
        "target/criterion/parse_validate_encode/$1/new/estimates.json"
}
ours=$(median_ms "10k points")
reference=$(median_ms "serde_json syntax only")
awk -v b="$bytes" -v o="$ours" -v r="$reference" 'BEGIN {
    printf "parse + validate + encode: median %.2f ms, %.0f MB/s (%d bytes)\n", o / 1e6, b / o * 1e3, b
    printf "serde_json syntax only:    median %.2f ms, %.0f MB/s; ratio %.2f\n", r / 1e6, b / r * 1e3, r / o
}'
