#!/usr/bin/env bash
# CQL2 filters over 1,000,000 rows answer in index time, not scan time
# (docs/performance.md, "Filters"): the same page of `filter=` on an indexed
# column, on the same values in a column without an index, and a spatial
# filter (GiST), through a release build of the service next to a
# throwaway cluster. ROWS (default 1000000), RUNS (default 15) per query;
# medians, in milliseconds, each request's whole time (curl).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh
rows=${ROWS:-1000000}
runs=${RUNS:-15}
target=${CARGO_TARGET_DIR:-target}

ensure_postgis
throwaway_cluster
port=$cluster_port
pg_psql "$port" -d postgres -c "CREATE DATABASE filterbench" >/dev/null
pg_psql "$port" -d filterbench >/dev/null <<SQL
CREATE EXTENSION postgis;
-- indexed and plain: the same values, one column with a B-tree, one without.
CREATE TABLE sites (id serial PRIMARY KEY, indexed int4, plain int4, name text,
                    geom geometry(Point, 4326));
INSERT INTO sites (indexed, plain, name, geom)
     SELECT i % 100000, i % 100000, 'site ' || i,
            ST_SetSRID(ST_MakePoint(-180 + random() * 360, -85 + random() * 170), 4326)
       FROM generate_series(1, $rows) AS i;
CREATE INDEX ON sites (indexed);
CREATE INDEX ON sites USING gist (geom);
VACUUM ANALYZE sites;
-- The same number of points over France, stored in Lambert-93, for a bbox
-- in CRS84 (compared in CRS84, the index narrowing by its image).
CREATE TABLE sites_l93 (id serial PRIMARY KEY, geom geometry(Point, 2154));
INSERT INTO sites_l93 (geom)
     SELECT ST_Transform(ST_SetSRID(ST_MakePoint(-5 + random() * 15, 41 + random() * 10), 4326), 2154)
       FROM generate_series(1, $rows) AS i;
CREATE INDEX ON sites_l93 USING gist (geom);
VACUUM ANALYZE sites_l93;
SQL
cargo build --release --quiet
listen=127.0.0.1:$(free_port)
DATABASE_URL="postgres://postgres@127.0.0.1:$port/filterbench" FEATUREPIPE_AUTH=off \
    FEATUREPIPE_LISTEN=$listen "$target/release/featurepipe" serve > /tmp/filterbench-service.log 2>&1 &
svc=$!
trap 'kill $svc 2>/dev/null || true; stop_cluster "$cluster_dir/data"; rm -rf "$cluster_dir"' EXIT
for _ in $(seq 1 100); do curl -sf "http://$listen/readyz" >/dev/null && break; sleep 0.1; done

# median of the numbers on stdin
median() {
    sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# The median time of `url` over RUNS requests, in milliseconds.
median_ms() {
    for _ in $(seq 1 "$runs"); do
        curl -sf -o /dev/null -w '%{time_total}\n' "$1"
    done | median | awk '{ printf "%.1f", $1 * 1000 }'
}

echo "| filter (${rows} rows) | matched | median ms |"
echo "|---|--:|--:|"
for filter in "indexed = 4242" "plain = 4242" "indexed BETWEEN 4242 AND 4251" "plain BETWEEN 4242 AND 4251" \
              "S_INTERSECTS(geom, BBOX(10, 45, 10.5, 45.5))" \
              "S_INTERSECTS(geom, BBOX(10, 45, 10.5, 45.5)) AND indexed < 50000"; do
    query=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$filter")
    url="http://$listen/collections/sites/items?limit=100&filter=$query"
    matched=$(curl -sf "$url" | python3 -c 'import json, sys; print(json.load(sys.stdin)["numberMatched"])')
    echo "| \`$filter\` | $matched | $(median_ms "$url") |"
done
echo
echo "| bbox in CRS84 on Lambert-93 (${rows} rows) | matched | median ms |"
echo "|---|--:|--:|"
for bbox in "2,46,2.1,46.1" "2,46,3,47" "-180,-90,180,90"; do
    url="http://$listen/collections/sites_l93/items?limit=100&bbox=$bbox"
    matched=$(curl -sf "$url" | python3 -c 'import json, sys; print(json.load(sys.stdin)["numberMatched"])')
    echo "| \`$bbox\` | $matched | $(median_ms "$url") |"
done
