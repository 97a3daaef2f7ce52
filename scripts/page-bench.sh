#!/usr/bin/env bash
# The time of a 1,000-feature items page, plain and in each compression, on a
# release build with a throwaway cluster (docs/performance.md, "Reading a page").
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh
ensure_postgis
throwaway_cluster fast
port=$cluster_port
pg_psql "$port" -d postgres -c "CREATE DATABASE pagebench" >/dev/null
pg_psql "$port" -d pagebench -c "CREATE EXTENSION postgis" >/dev/null
pg_psql "$port" -d pagebench -f scripts/demo.sql >/dev/null
export DATABASE_URL="postgres://postgres@127.0.0.1:$port/pagebench" FEATUREPIPE_AUTH=off FEATUREPIPE_LISTEN=127.0.0.1:18090
cargo build --release --quiet
target/release/featurepipe serve > /tmp/pagebench-service.log 2>&1 &
svc=$!
# Stop the service, then the cluster (this replaces throwaway_cluster's trap).
trap 'kill $svc 2>/dev/null || true; stop_cluster "$cluster_dir/data"; rm -rf "$cluster_dir"' EXIT
for i in $(seq 1 50); do curl -sf http://127.0.0.1:18090/healthz >/dev/null && break; sleep 0.2; done
python3 - <<'PY' > /tmp/fc1000.json
import json
print(json.dumps({"type":"FeatureCollection","features":[{"type":"Feature","geometry":{"type":"Point","coordinates":[5+i/1000,45+i/1000]},"properties":{"name":f"place {i}","height_m":i*0.5}} for i in range(1000)]}))
PY
curl -sf -X POST -H 'content-type: application/geo+json' --data-binary @/tmp/fc1000.json http://127.0.0.1:18090/collections/places/items >/dev/null
url='http://127.0.0.1:18090/collections/places/items?limit=1000'
for enc in identity gzip br zstd; do
  size=$(curl -s -H "accept-encoding: $enc" "$url" | wc -c)
  echo "== $enc: $size bytes on the wire"
  farm-bench -n 21 -- curl -s -o /dev/null -H "accept-encoding: $enc" "$url" 2>&1 | grep -E "wall|runs" | head -3
done
