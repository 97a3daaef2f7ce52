#!/usr/bin/env bash
# Run the whole test suite against a throwaway PostgreSQL + PostGIS cluster:
# initdb into a temp dir, a free port, removed afterwards whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh

ensure_postgis
throwaway_cluster fast
port=$cluster_port
# Each test creates its own database from this template, so tests run in parallel.
pg_psql "$port" -d postgres -c "CREATE DATABASE featurepipe_template"
pg_psql "$port" -d featurepipe_template -c "CREATE EXTENSION postgis"
export FEATUREPIPE_TEST_PG="postgres://postgres@127.0.0.1:$port"
echo "test cluster: $FEATUREPIPE_TEST_PG (data in $cluster_dir)"
cargo test --all-targets "$@"
