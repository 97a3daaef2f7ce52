#!/usr/bin/env bash
# `make bench-parse`: criterion's parse + validate + encode benchmarks (one
# core), then each function's median as MB/s. The median, because the machine
# is shared: a neighbour's burst moves criterion's mean, not its median. The
# serde_json syntax-only pass over the first body runs beside it as a reference.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(mktemp)
trap 'rm -f "$started"' EXIT
cargo bench --bench parse -- "$@"
for dir in target/criterion/parse_validate_encode/*/new; do
    name=$(basename "$(dirname "$dir")")
    # Only what this run measured (a filter argument may skip some).
    [ "$dir/estimates.json" -nt "$started" ] || continue
    bytes=$(sed -n 's/.*"throughput":{"Bytes":\([0-9]*\).*/\1/p' "$dir/benchmark.json")
    # estimates.json: {"mean":{...},"median":{"confidence_interval":{...},"point_estimate":NS,...},...}
    ns=$(sed -n 's/.*"median":{[^}]*}[^}]*"point_estimate":\([0-9.e+-]*\).*/\1/p' "$dir/estimates.json")
    awk -v n="$name" -v b="$bytes" -v t="$ns" 'BEGIN {
        printf "%-32s median %6.2f ms  %4.0f MB/s  (%d bytes)\n", n, t / 1e6, b / t * 1e3, b
    }'
done
