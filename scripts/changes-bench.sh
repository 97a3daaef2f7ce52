#!/usr/bin/env bash
# What a change feed costs a write, in rows per second (docs/offline-sync.md,
# "What it costs"): the same points written to a table without a feed and to
# one with (`changes = true`), through featurepipe (pipelined INSERT and COPY)
# and in plain SQL. A release build on a throwaway cluster with durable
# settings, next to the database (no latency: the cost is the database's).
# FEATURES (default 20000) per request, RUNS (default 5) of each; medians.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh
features=${FEATURES:-20000}
runs=${RUNS:-5}
target=${CARGO_TARGET_DIR:-target}

ensure_postgis
throwaway_cluster
port=$cluster_port
pg_psql "$port" -d postgres -c "CREATE DATABASE feedbench" >/dev/null
pg_psql "$port" -d feedbench >/dev/null <<'SQL'
CREATE EXTENSION postgis;
CREATE TABLE plain (id serial PRIMARY KEY, name text, seq integer, geom geometry(Point, 4326));
CREATE TABLE fed (id serial PRIMARY KEY, name text, seq integer, geom geometry(Point, 4326));
CREATE INDEX ON plain USING gist (geom);
CREATE INDEX ON fed USING gist (geom);
SQL
settings=$(mktemp /tmp/feedbench-settings.XXXXXX.toml)
body=$(mktemp /tmp/feedbench-body.XXXXXX.json)
printf '[collections.fed]\nchanges = true\n' > "$settings"
python3 - "$features" > "$body" <<'PY'
import json, sys
n = int(sys.argv[1])
print(json.dumps({"type": "FeatureCollection", "features": [
    {"type": "Feature", "geometry": {"type": "Point", "coordinates": [i % 360 - 180 + 0.5, (i % 170) - 85 + 0.5]},
     "properties": {"name": f"point {i}", "seq": i}} for i in range(n)]}))
PY
cargo build --release --quiet
svc=
# Stop the service, then the cluster (this replaces throwaway_cluster's trap).
trap 'if [ -n "$svc" ]; then kill "$svc" 2>/dev/null || true; fi; stop_cluster "$cluster_dir/data"; rm -rf "$cluster_dir" "$settings" "$body"' EXIT
listen=127.0.0.1:$(free_port)

# Empty both tables and the change log, so that every run starts alike.
reset() {
    pg_psql "$port" -d feedbench -c "TRUNCATE plain, fed RESTART IDENTITY; TRUNCATE featurepipe.changes" >/dev/null
}

# median of the numbers on stdin
median() {
    sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

echo "| write | table | median s | rows/s |"
echo "|---|---|---|---|"
for strategy in insert copy; do
    DATABASE_URL="postgres://postgres@127.0.0.1:$port/feedbench" FEATUREPIPE_AUTH=off \
        FEATUREPIPE_LISTEN=$listen FEATUREPIPE_CONFIG=$settings \
        FEATUREPIPE_WRITE_STRATEGY=$strategy FEATUREPIPE_MAX_FEATURES=$features \
        "$target/release/featurepipe" serve > /tmp/feedbench-service.log 2>&1 &
    svc=$!
    for _ in $(seq 1 100); do curl -sf "http://$listen/readyz" >/dev/null && break; sleep 0.1; done
    for table in plain fed; do
        times=$(for _ in $(seq 1 "$runs"); do
            reset
            curl -sf -o /dev/null -w '%{time_total}\n' -X POST -H 'content-type: application/geo+json' \
                --data-binary @"$body" "http://$listen/collections/$table/items"
        done | median)
        rows=$(pg_psql "$port" -d feedbench -At -c "SELECT count(*) FROM $table")
        logged=$(pg_psql "$port" -d feedbench -At -c "SELECT coalesce(sum(cardinality(coalesce(keys, ARRAY[key]))), 0) FROM featurepipe.changes")
        [ "$rows" = "$features" ] || { echo "wrote $rows rows, not $features" >&2; exit 1; }
        if [ "$table" = fed ] && [ "$logged" != "$features" ]; then echo "logged $logged changes" >&2; exit 1; fi
        echo "| featurepipe, $strategy | $table | $times | $(python3 -c "print(round($features / $times))") |"
    done
    kill "$svc"
    wait "$svc" 2>/dev/null || true
    svc=
done
for table in plain fed; do
    times=$(for _ in $(seq 1 "$runs"); do
        reset
        pg_psql "$port" -d feedbench -At <<SQL | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | awk '{ print $1 / 1000 }'
\timing on
INSERT INTO $table (name, seq, geom)
    SELECT 'point ' || g, g, ST_SetSRID(ST_MakePoint(g % 360 - 179.5, g % 170 - 84.5), 4326)
      FROM generate_series(1, $features) AS g;
SQL
    done | median)
    echo "| plain SQL, one INSERT … SELECT | $table | $times | $(python3 -c "print(round($features / $times))") |"
done
