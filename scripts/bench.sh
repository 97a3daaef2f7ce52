#!/usr/bin/env bash
# `make bench` / `make bench-quick`: the write strategies side by side on a
# throwaway PostGIS cluster (durable settings), behind the latency proxy.
# Writes bench/results.md and bench/results.svg (or results-quick.*).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh

ensure_postgis
throwaway_cluster
port=$cluster_port
pg_psql "$port" -d postgres -c "CREATE DATABASE bench"
pg_psql "$port" -d bench <<'SQL'
CREATE EXTENSION postgis;
CREATE TABLE points (id serial PRIMARY KEY, name text, seq integer, geom geometry(Point, 4326));
CREATE INDEX points_geom ON points USING gist (geom);
CREATE TABLE polys (id serial PRIMARY KEY, name text, seq integer, geom geometry(Polygon, 4326));
CREATE INDEX polys_geom ON polys USING gist (geom);
SQL
cargo build --release
export FEATUREPIPE_BENCH_PG="postgres://postgres@127.0.0.1:$port"
export FEATUREPIPE_BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/featurepipe"
export FEATUREPIPE_BENCH_OUT="$PWD/bench"
cargo bench --bench matrix -- "$@"
