#!/usr/bin/env bash
# Run the whole test suite against a throwaway PostgreSQL + PostGIS cluster:
# initdb into a temp dir, a free port, removed afterwards whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh

ensure_postgis
# Clients nobody here wrote, used by tests/it/clients.rs and schemas.rs: GDAL's
# ogrinfo, and OWSLib and python-jsonschema in a virtualenv under target/
# (built once, like cargo's output); and Playwright there, which drives the
# Chromium below (tests/it/browser.rs; it downloads no browser of its own).
ensure_package /usr/bin/ogrinfo gdal-bin
# Headless Chromium, for the browser tests (tests/it/browser*.rs).
ensure_package /usr/bin/chromium chromium
export FEATUREPIPE_TEST_CHROMIUM=/usr/bin/chromium
# openssl makes the X.509 v1 certificate of tests/it/tls.rs (rcgen makes only v3).
ensure_package /usr/bin/openssl openssl
# PgBouncer, for tests/it/poolers.rs (started by the tests in both pool modes).
ensure_package /usr/sbin/pgbouncer pgbouncer
venv=target/client-venv
if ! "$venv/bin/python" -c 'import owslib, playwright, jsonschema' 2>/dev/null; then
    python3 -m venv "$venv"
    # `python -m pip`, not bin/pip: a venv copied from another worktree keeps
    # scripts that name the other one's interpreter, and would install there.
    "$venv/bin/python" -m pip install -q 'OWSLib==0.35.0' 'playwright==1.65.2' 'jsonschema==4.26.0'
fi
export FEATUREPIPE_TEST_PYTHON="$PWD/$venv/bin/python"
throwaway_cluster fast
port=$cluster_port
# Each test creates its own database from this template, so tests run in parallel.
pg_psql "$port" -d postgres -c "CREATE DATABASE featurepipe_template"
pg_psql "$port" -d featurepipe_template -c "CREATE EXTENSION postgis"
export FEATUREPIPE_TEST_PG="postgres://postgres@127.0.0.1:$port"
echo "test cluster: $FEATUREPIPE_TEST_PG (data in $cluster_dir)"
# Scratch files of the tests (their own clusters, Chromium profiles that a
# browser's helper processes may still write to when a test removes them) go
# under the cluster's dir, so the EXIT trap removes whatever a test left.
export TMPDIR="$cluster_dir/tmp"
mkdir -m 1777 "$TMPDIR"
# --workspace: the test proxy (crates/latency-proxy) has unit tests of its own.
cargo test --workspace --all-targets "$@"
