#!/usr/bin/env bash
# `make bench-citus` (opt-in): 20,000 points POSTed through featurepipe (its
# release build) into a table Citus distributes by its key, beside a raw
# binary COPY of the same rows into the same table (psycopg), interleaved,
# and the same into a table distributed by a tenant (keyed by two columns),
# ROUNDS rounds (5) each, medians (docs/deploying.md#citus). Needs
# FEATUREPIPE_TEST_CITUS, a Citus coordinator's database with the citus and
# postgis extensions and workers added, and Python's psycopg (installed with
# pip when missing). The table lives in a schema of its own, dropped after.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh
url=${FEATUREPIPE_TEST_CITUS:?FEATUREPIPE_TEST_CITUS must name a Citus coordinator, e.g. postgres://postgres@127.0.0.1:9700/citus}
python3 -c 'import psycopg' 2>/dev/null || pip install --quiet 'psycopg[binary]'
cargo build --release --quiet
schema=fp_bench_$$
psql "$url" -X -q -v ON_ERROR_STOP=1 <<SQL
CREATE SCHEMA $schema;
CREATE TABLE $schema.sites (id bigserial PRIMARY KEY, name text NOT NULL DEFAULT 'unnamed',
                            height float8, geom geometry(Point, 4326));
SELECT create_distributed_table('$schema.sites', 'id');
CREATE TABLE $schema.team_sites (team int NOT NULL, id bigserial, name text NOT NULL DEFAULT 'unnamed',
                                 height float8, geom geometry(Point, 4326), PRIMARY KEY (team, id));
SELECT create_distributed_table('$schema.team_sites', 'team');
SQL
port=$(free_port)
DATABASE_URL=$url FEATUREPIPE_AUTH=off FEATUREPIPE_SCHEMAS=$schema FEATUREPIPE_LISTEN=127.0.0.1:$port \
    RUST_LOG=warn "${CARGO_TARGET_DIR:-target}/release/featurepipe" serve > /dev/null 2>&1 &
svc=$!
trap 'kill $svc 2>/dev/null; psql "$url" -X -q -c "DROP SCHEMA $schema CASCADE" >/dev/null' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
python3 scripts/citus_bench.py "http://127.0.0.1:$port" "$url" "$schema" "${ROUNDS:-5}"
