#!/usr/bin/env bash
# `make run`: start featurepipe. Without DATABASE_URL, set up a local PostGIS
# cluster under ./.featurepipe-dev with a demo table, and stop it on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh

# A development server: open unless asked otherwise (the service says so too).
export FEATUREPIPE_AUTH="${FEATUREPIPE_AUTH:-off}"
if [ "$FEATUREPIPE_AUTH" = off ]; then
    echo "make run: authentication is off (FEATUREPIPE_AUTH=off): anyone may read and write" >&2
fi

# Web pages on any origin (a map editor on a dev server) may call it.
export FEATUREPIPE_CORS_ORIGINS="${FEATUREPIPE_CORS_ORIGINS:-*}"
echo "make run: pages on any origin may call the API (FEATUREPIPE_CORS_ORIGINS=$FEATUREPIPE_CORS_ORIGINS)" >&2

if [ -n "${DATABASE_URL:-}" ]; then
    exec cargo run --release -- serve "$@"
fi

ensure_postgis
port=${FEATUREPIPE_DEV_PORT:-54329}
mkdir -p .featurepipe-dev
data="$PWD/.featurepipe-dev/data"
# As root the server runs as `postgres`, which may not reach into this checkout
# (e.g. under /root): then keep the data in /var/tmp and link it here.
if [ "$(id -u)" -eq 0 ] && ! runuser -u postgres -- test -x "$PWD/.featurepipe-dev"; then
    real="/var/tmp/featurepipe-dev-$(echo "$PWD" | md5sum | cut -c1-8)"
    mkdir -p "$real"
    ln -sfn "$real" "$data"
    data="$real"
fi
if ! as_pg_user "$(pg_bindir)/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    start_cluster "$data" "$port"
    trap 'stop_cluster "$data"' EXIT
fi
if [ -z "$(pg_psql "$port" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'featurepipe'")" ]; then
    pg_psql "$port" -d postgres -c "CREATE DATABASE featurepipe"
fi
pg_psql "$port" -d featurepipe -f scripts/demo.sql
export DATABASE_URL="postgres://postgres@127.0.0.1:$port/featurepipe"
echo "dev database: $DATABASE_URL (data in $data)"
cargo run --release -- serve "$@"
