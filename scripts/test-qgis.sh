#!/usr/bin/env bash
# `make test-qgis` (opt-in, not part of `make test`): real QGIS 3.40, headless,
# against the service. QGIS runs inside the Debian trixie chroot of
# scripts/qgis-chroot.sh (made once, cached outside the repo); the service
# (target/debug/featurepipe, built first) and a throwaway PostgreSQL +
# PostGIS cluster run here, and QGIS reaches them over loopback through a
# logging proxy (tests/qgis/logging_proxy.py) that records every request
# QGIS sends. tests/qgis/qgis_edits.py drives QGIS's OAPIF provider, then
# tests/qgis/plugin_tests.py the featurepipe plugin (its ZIP installed into
# a clean profile); this script then checks the tables with psql, and what
# the proxies saw. Needs root (chroot). FEATUREPIPE_QGIS_KEEP=1 keeps the
# run's directory; FEATUREPIPE_QGIS_SCREENSHOT=FILE.png saves the plugin's
# conflict dialog there.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh
target=${CARGO_TARGET_DIR:-target}
# FEATUREPIPE_QGIS_RELEASE=1: the service's release build, for the plugin's
# measured figures (docs/qgis-plugin.md); the debug build otherwise.
profile=debug
[ -n "${FEATUREPIPE_QGIS_RELEASE:-}" ] && profile=release
bin=$target/$profile/featurepipe
chroot_root=${FEATUREPIPE_QGIS_CHROOT:-/var/cache/featurepipe/qgis-trixie}
export FEATUREPIPE_QGIS_CHROOT=$chroot_root
t0=$(date +%s)

if [ "$(id -u)" -ne 0 ]; then
    echo "test-qgis: needs root (the QGIS chroot)" >&2
    exit 1
fi
ensure_postgis
scripts/qgis-chroot.sh >/dev/null
t_chroot=$(date +%s)
# Built (or found up to date): the plugin's tests need today's service.
if [ "$profile" = release ]; then cargo build --quiet --release; else cargo build --quiet; fi

svc= proxy= run= others=
cleanup() {
    local rc=$?
    for p in $proxy $svc $others; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    stop_cluster "$cluster_dir/data"
    rm -rf "$cluster_dir"
    if [ -z "$run" ]; then
        :
    elif [ "$rc" -ne 0 ] || [ -n "${FEATUREPIPE_QGIS_KEEP:-}" ]; then
        echo "test-qgis: the run's files (service and proxy logs, QGIS output): $run" >&2
    else
        rm -rf "$run"
    fi
}
throwaway_cluster fast
# Stop the proxy, the service and the cluster (this replaces throwaway_cluster's trap).
trap cleanup EXIT
trap 'exit 130' INT TERM
# The run's files live inside the chroot, where QGIS reads them as /tmp/<name>.
run=$(mktemp -d "$chroot_root/tmp/featurepipe-qgis.XXXXXX")
chmod 755 "$run"
inside=/tmp/$(basename "$run")
port=$cluster_port
pg_psql "$port" -d postgres -c "CREATE DATABASE qgis" >/dev/null
pg_psql "$port" -d qgis >/dev/null <<'SQL'
CREATE EXTENSION postgis;
CREATE TABLE pois (id serial PRIMARY KEY, name text NOT NULL DEFAULT 'unnamed', kind text DEFAULT 'other',
                   height float8, visited date, geom geometry(Point, 4326));
-- QGIS 3.40 types a layer's fields from its first features (it reads no
-- schema), so the layer QGIS edits starts with one feature.
INSERT INTO pois (name, kind, height, visited, geom)
     VALUES ('seed', 'seed', 2.5, '2024-01-01', 'SRID=4326;POINT(0 0)');
-- Every row QGIS writes, as written (an AFTER trigger: the service sees no
-- BEFORE INSERT trigger, so null_means_default applies), in a schema the
-- service does not publish.
CREATE SCHEMA audit;
CREATE TABLE audit.pois (seq bigserial PRIMARY KEY, op text NOT NULL, old jsonb, new jsonb);
CREATE FUNCTION audit.pois_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit.pois (op, old, new)
         VALUES (TG_OP, CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) END,
                        CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END);
    RETURN NULL;
END $$;
CREATE TRIGGER pois_log AFTER INSERT OR UPDATE OR DELETE ON pois FOR EACH ROW EXECUTE FUNCTION audit.pois_log();
-- Keyed by two columns, as Citus needs of a table distributed by its team:
-- its features' ids are `team,id` (tests/qgis/qgis_edits.py edits them).
CREATE TABLE team_pois (team text NOT NULL, id serial, name text, geom geometry(Point, 4326),
                        PRIMARY KEY (team, id));
INSERT INTO team_pois (team, name, geom) VALUES ('seed', 'seed', 'SRID=4326;POINT(0 0)');
-- 2,500 features to read, and to filter.
CREATE TABLE big (id serial PRIMARY KEY, name text NOT NULL, kind text, height float8, visited date,
                  geom geometry(Point, 4326));
INSERT INTO big (name, kind, height, visited, geom)
     SELECT 'big ' || i, (ARRAY['shop', 'cafe', 'park', 'other'])[i % 4 + 1],
            CASE WHEN i % 10 = 0 THEN NULL ELSE i * 0.5 END,
            date '2024-01-01' + i % 366,
            ST_SetSRID(ST_MakePoint(-10 + (i % 50) * 0.4, 35 + (i / 50) * 0.2), 4326)
       FROM generate_series(1, 2500) AS i;
SQL

# The filters set as the layer's subset string (a QGIS expression, which the
# OAPIF provider turns into CQL2 text where it can), the same in SQL, and
# whether QGIS 3.40 sends it to the service (null: either is fine). It
# sends S_INTERSECTS with a point or a box (since the service declares the
# drafts' basic-spatial-operators and publishes the geometry queryable with
# its GeoJSON `$ref`), and filters by any other geometry itself.
cat > "$run/filters.json" <<'JSON'
[
  {"name": "equals", "server": true, "qgis": "kind = 'cafe'", "sql": "kind = 'cafe'"},
  {"name": "and_numbers", "server": true, "qgis": "height > 1000 AND kind <> 'park'", "sql": "height > 1000 AND kind <> 'park'"},
  {"name": "date", "server": true, "qgis": "visited >= '2024-07-01'", "sql": "visited >= date '2024-07-01'"},
  {"name": "like", "server": true, "qgis": "name LIKE 'big 12%'", "sql": "name LIKE 'big 12%'"},
  {"name": "ilike", "server": true, "qgis": "name ILIKE 'BIG 7%'", "sql": "name ILIKE 'BIG 7%'"},
  {"name": "in", "server": true, "qgis": "kind IN ('shop', 'park')", "sql": "kind IN ('shop', 'park')"},
  {"name": "between", "server": true, "qgis": "height BETWEEN 100 AND 200", "sql": "height BETWEEN 100 AND 200"},
  {"name": "is_null", "server": true, "qgis": "height IS NULL", "sql": "height IS NULL"},
  {"name": "or_not", "server": true, "qgis": "NOT (kind = 'shop') OR height < 10", "sql": "NOT (kind = 'shop') OR height < 10"},
  {"name": "intersects_polygon", "server": null,
   "qgis": "intersects($geometry, geom_from_wkt('POLYGON((-5 36, 0 36, 0 40, -5 40, -5 36))'))",
   "sql": "ST_Intersects(geom, ST_MakeEnvelope(-5, 36, 0, 40, 4326))"},
  {"name": "intersects_bbox", "server": true,
   "qgis": "intersects_bbox($geometry, geom_from_wkt('POLYGON((-5 36, 0 36, 0 40, -5 40, -5 36))'))",
   "sql": "ST_Intersects(geom, ST_MakeEnvelope(-5, 36, 0, 40, 4326))"},
  {"name": "intersects_point", "server": true,
   "qgis": "intersects($geometry, geom_from_wkt('POINT(-10 35.2)'))",
   "sql": "ST_Intersects(geom, ST_SetSRID(ST_MakePoint(-10, 35.2), 4326))"},
  {"name": "client_side", "server": false, "qgis": "length(name) = 6", "sql": "length(name) = 6"}
]
JSON

printf '[collections.pois]\nnull_means_default = true\n' > "$run/settings.toml"
listen_port=$(free_port)
DATABASE_URL="postgres://postgres@127.0.0.1:$port/qgis" FEATUREPIPE_AUTH=off \
    FEATUREPIPE_LISTEN=127.0.0.1:$listen_port FEATUREPIPE_CONFIG=$run/settings.toml \
    RUST_LOG=featurepipe=debug,warn "$bin" serve > "$run/service.log" 2>&1 &
svc=$!
for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$listen_port/readyz" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$listen_port/readyz" >/dev/null || {
    echo "test-qgis: the service did not get ready; its log:" >&2
    tail -n 30 "$run/service.log" >&2
    exit 1
}
proxy_port=$(free_port)
: > "$run/proxy.log"
python3 tests/qgis/logging_proxy.py "$proxy_port" "$listen_port" "$run/proxy.log" 2> "$run/proxy.err" &
proxy=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$proxy_port/readyz" >/dev/null && break; sleep 0.1; done
: > "$run/proxy.log"
echo "test-qgis: service on 127.0.0.1:$listen_port, QGIS's way in (logging proxy) on 127.0.0.1:$proxy_port" >&2

cp tests/qgis/qgis_edits.py tests/qgis/plugin_tests.py tests/qgis/harness.py "$run/"
# QGIS's profile, network cache and scratch files: the run's own, removed with it.
mkdir -p "$run/tmp" "$run/runtime"
chmod 700 "$run/runtime"

# qgis_run SCRIPT NAME ARGS...: tests/qgis/SCRIPT in QGIS, in the chroot, with
# a clean profile of its own; its output in $run/NAME.out and .err. Sets
# $qgis_rc and $result (its RESULT line, also in $run/NAME-result.json); a
# script that printed none stops the test.
qgis_run() {
    local script=$1 name=$2
    shift 2
    mkdir -p "$run/$name-home"
    set +e
    scripts/qgis-chroot.sh run env HOME="$inside/$name-home" TMPDIR="$inside/tmp" XDG_RUNTIME_DIR="$inside/runtime" \
        python3 "$inside/$script" "$@" > "$run/$name.out" 2> "$run/$name.err"
    qgis_rc=$?
    set -e
    grep -v '^RESULT ' "$run/$name.out" >&2 || true
    result=$(sed -n 's/^RESULT //p' "$run/$name.out" | tail -n 1)
    if [ -z "$result" ]; then
        echo "test-qgis: $script printed no result (exit $qgis_rc); its stderr:" >&2
        tail -n 40 "$run/$name.err" >&2
        exit 1
    fi
    printf '%s\n' "$result" > "$run/$name-result.json"
}
t_qgis=$(date +%s)
qgis_run qgis_edits.py qgis "http://127.0.0.1:$proxy_port" "$inside/proxy.log" "$inside/filters.json"
edits_rc=$qgis_rc edits_result=$result
t_done=$(date +%s)

# psql: what QGIS's writes left in the database (the audit trail, then the table).
q() { pg_psql "$port" -d qgis -At -c "$1"; }
checks=$(mktemp "$run/checks.XXXXXX")
check() { # check WHAT EXPECTED ACTUAL
    if [ "$2" = "$3" ]; then
        echo "ok   $1: $3" >> "$checks"
    else
        echo "FAIL $1: expected $2, got $3" >> "$checks"
    fi
}
# i = 0..49 (tests/qgis/qgis_edits.py): name NULL when i % 5 = 0, kind NULL
# when i % 3 = 0, height NULL when i % 4 = 0, visited NULL when i is odd; the
# point at (10 + i/100, 45 + i/100).
ins="FROM (SELECT new, round((ST_X((new->>'geom')::geometry) - 10) * 100)::int AS i FROM audit.pois
           WHERE op = 'INSERT' AND new->>'name' IS DISTINCT FROM 'seed') AS ins"
check "rows inserted" 50 "$(q "SELECT count(*) $ins")"
check "name NULL -> its default 'unnamed' (NOT NULL column)" 10 "$(q "SELECT count(*) $ins WHERE new->>'name' = 'unnamed'")"
check "kind NULL -> its default 'other' (null_means_default)" 17 "$(q "SELECT count(*) $ins WHERE new->>'kind' = 'other'")"
check "names as sent, or the default" 50 \
    "$(q "SELECT count(*) $ins WHERE new->>'name' = CASE WHEN i % 5 = 0 THEN 'unnamed' ELSE 'qgis ' || i END")"
check "kinds as sent, or the default" 50 \
    "$(q "SELECT count(*) $ins WHERE new->>'kind' = CASE WHEN i % 3 = 0 THEN 'other' ELSE (ARRAY['shop', 'cafe'])[i % 2 + 1] END")"
check "heights as sent (NULL: no default)" 50 \
    "$(q "SELECT count(*) $ins WHERE (new->>'height')::float8 IS NOT DISTINCT FROM CASE WHEN i % 4 <> 0 THEN i * 1.5 END")"
check "visited as sent (NULL: no default)" 50 \
    "$(q "SELECT count(*) $ins WHERE (new->>'visited')::date IS NOT DISTINCT FROM CASE WHEN i % 2 = 0 THEN date '2024-03-01' + i % 28 END")"
check "points as sent (SRID 4326)" 50 \
    "$(q "SELECT count(*) $ins WHERE ST_SRID((new->>'geom')::geometry) = 4326
            AND abs(ST_X((new->>'geom')::geometry) - (10 + i / 100.0)) < 1e-9 AND abs(ST_Y((new->>'geom')::geometry) - (45 + i / 100.0)) < 1e-9")"
check "features given kind 'changed' and height 99.25" 50 \
    "$(q "SELECT count(DISTINCT new->>'id') FROM audit.pois WHERE op = 'UPDATE' AND new->>'kind' = 'changed' AND (new->>'height')::float8 = 99.25")"
check "the move of 'qgis 7'" "POINT(-70.25 -33.5)" \
    "$(q "SELECT ST_AsText((old->>'geom')::geometry) FROM audit.pois WHERE op = 'DELETE' AND old->>'name' = 'qgis 7'")"
check "updates that moved a geometry" 1 \
    "$(q "SELECT count(*) FROM audit.pois WHERE op = 'UPDATE' AND NOT ST_Equals((old->>'geom')::geometry, (new->>'geom')::geometry)")"
check "rows deleted" 50 "$(q "SELECT count(*) FROM audit.pois WHERE op = 'DELETE'")"
check "rows left (the seed)" "1 seed" "$(q "SELECT count(*) || ' ' || string_agg(name, ',') FROM pois")"
check "team_pois: rows left after QGIS's edits by composite id (the seed)" "1 seed" \
    "$(q "SELECT count(*) || ' ' || string_agg(name, ',') FROM team_pois")"

# What QGIS showed, from its result line.
# r_of RESULT EXPR: EXPR of a script's RESULT (as `r`); r and pr: of each script's.
r_of() { python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(eval(sys.argv[2], {"r": r}))' "$1" "$2"; }
r() { r_of "$edits_result" "$1"; }
check "QGIS version" 3.40 "$(r 'r["qgis"][:4]')"
check "QGIS: features read from big" 2500 "$(r 'r.get("big", {}).get("features_read")')"
check "QGIS: distinct features read from big" 2500 "$(r 'r.get("big", {}).get("distinct_names")')"
check "QGIS: featureCount() of big" 2500 "$(r 'r.get("big", {}).get("feature_count")')"
check "QGIS: failures it saw" "[]" "$(r 'r["failures"]')"
check "QGIS: new features it shows after the commit" 50 "$(r 'r.get("add", {}).get("features_shown")')"
check "QGIS: of them, named 'unnamed' (read back after the POST)" 10 "$(r 'r.get("add", {}).get("names_unnamed_shown")')"
check "QGIS: of them, of kind 'other'" 17 "$(r 'r.get("add", {}).get("kinds_other_shown")')"
check "QGIS: features it shows changed" 50 "$(r 'r.get("change", {}).get("kinds_changed_shown")')"
check "QGIS: where it shows the moved feature" "[-70.25, -33.5]" "$(r 'r.get("move", {}).get("shown_at")')"
check "QGIS: added features it shows after the delete" 0 "$(r 'r.get("delete", {}).get("features_left_shown")')"
check "QGIS: pages of 1,000 or more for the 2,500 features" True "$(r 'r.get("big", {}).get("item_pages", 99) <= 3')"
for name in $(python3 -c 'import json,sys; print(" ".join(f["name"] for f in json.load(open(sys.argv[1]))))' "$run/filters.json"); do
    sql=$(python3 -c 'import json,sys; print(next(f["sql"] for f in json.load(open(sys.argv[1])) if f["name"] == sys.argv[2]))' "$run/filters.json" "$name")
    expected=$(q "SELECT count(*) FROM big WHERE $sql")
    digest=$(q "SELECT encode(sha256(convert_to(coalesce(string_agg(name, E'\\n' ORDER BY name COLLATE \"C\"), ''), 'UTF8')), 'hex') FROM big WHERE $sql")
    check "filter $name: features QGIS shows (SQL: $sql)" "$expected" "$(r "r.get('filters', {}).get('$name', {}).get('features_shown')")"
    check "filter $name: the very features SQL selects (sha256 of their names)" "$digest" "$(r "r.get('filters', {}).get('$name', {}).get('names_sha256')")"
    check "filter $name: no HTTP error" "[]" "$(r "r.get('filters', {}).get('$name', {}).get('http_errors')")"
    server=$(python3 -c 'import json,sys; print(next(f["server"] for f in json.load(open(sys.argv[1])) if f["name"] == sys.argv[2]))' "$run/filters.json" "$name")
    if [ "$server" != None ]; then
        check "filter $name: sent to the service as filter=" "$server" "$(r "bool(r.get('filters', {}).get('$name', {}).get('filter_targets'))")"
    fi
done
# The proxy's log: every request QGIS sent, and none answered with an error.
check "requests answered 4xx or 5xx" "[]" "$(python3 -c 'import json,sys; print([(e["status"], e["method"], e["target"], e.get("error", "")[:300]) for e in map(json.loads, open(sys.argv[1])) if e["status"] >= 400])' "$run/proxy.log")"

# A summary of the requests, and what QGIS made of each filter.
python3 - "$run/qgis-result.json" "$run/proxy.log" >&2 <<'PY'
import json, sys, urllib.parse
r = json.load(open(sys.argv[1]))
log = [json.loads(l) for l in open(sys.argv[2])]
print(f"QGIS {r['qgis']}: {len(log)} requests in all")
for step in ("add", "change", "move", "delete"):
    s = r.get(step)
    if s:
        print(f"  {step}: commit {'ok' if s['committed'] else 'FAILED'} in {s['seconds']} s, requests {s['requests']}")
        for e in s["http_errors"][:5]:
            print(f"    {e}")
b = r.get("big")
if b:
    print(f"  big: {b['features_read']} features in {b['seconds']} s, {b['item_pages']} pages (limit {b.get('page_limits')}): {b['item_page_targets']}")
for name, f in r.get("filters", {}).items():
    sent = [urllib.parse.unquote(urllib.parse.parse_qs(urllib.parse.urlsplit(t).query).get("filter", [""])[0]) for t in f["filter_targets"]]
    print(f"  filter {name}: {f['qgis']!r} -> {f['features_shown']} shown; sent: {sorted(set(sent)) or 'no filter= (filtered in QGIS)'}")
    for e in f["http_errors"][:3]:
        print(f"    {e}")
for m in r.get("messages", [])[-10:]:
    print("  QGIS log:", m[:300])
PY
# The plugin (clients/qgis/featurepipe), from its ZIP, in a clean QGIS
# profile (tests/qgis/plugin_tests.py), against a second service with
# authentication on: an API key in QGIS's authentication database.
cp "$(scripts/qgis-plugin.sh)" "$run/featurepipe.zip"
pg_psql "$port" -d qgis >/dev/null <<'SQL'
CREATE TABLE sites (id serial PRIMARY KEY, name text NOT NULL DEFAULT 'unnamed', kind text DEFAULT 'other',
                    height float8 CHECK (height >= 0), label text GENERATED ALWAYS AS (upper(name)) STORED,
                    geom geometry(Point, 4326));
INSERT INTO sites (name, kind, height, geom) VALUES ('seed', 'seed', 1.5, 'SRID=4326;POINT(0 0)');
CREATE SCHEMA audit_sites;
CREATE TABLE audit_sites.log (seq bigserial PRIMARY KEY, op text NOT NULL, id int, name text, kind text, height float8,
                              x float8, y float8);
CREATE FUNCTION audit_sites.log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A row as written (NEW), or as deleted (OLD).
    INSERT INTO audit_sites.log (op, id, name, kind, height, x, y)
         SELECT TG_OP, r.id, r.name, r.kind, r.height, ST_X(r.geom), ST_Y(r.geom)
           FROM (SELECT (CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END).*) AS r;
    RETURN NULL;
END $$;
CREATE TRIGGER log AFTER INSERT OR UPDATE OR DELETE ON sites FOR EACH ROW EXECUTE FUNCTION audit_sites.log();
-- The same saves timed on a table without a trigger, as most are.
CREATE TABLE plain (id serial PRIMARY KEY, name text NOT NULL DEFAULT 'unnamed', kind text DEFAULT 'other',
                    geom geometry(Point, 4326));
INSERT INTO plain (name, kind, geom) VALUES ('seed', 'seed', 'SRID=4326;POINT(0 0)');
-- Keyed by two columns: the plugin names its features by `featurepipe:id`.
CREATE TABLE team_plain (team text NOT NULL, id serial, name text, geom geometry(Point, 4326),
                         PRIMARY KEY (team, id));
INSERT INTO team_plain (team, name, geom) VALUES ('seed', 'seed', 'SRID=4326;POINT(0 0)');
CREATE TABLE loaded (id serial PRIMARY KEY, name text, n int, geom geometry(Point, 4326));
CREATE TABLE pushed (id serial PRIMARY KEY, name text, n int, geom geometry(Point, 4326));
CREATE TABLE timed_load (id serial PRIMARY KEY, name text, n int, geom geometry(Point, 4326));
CREATE TABLE timed_push (id serial PRIMARY KEY, name text, n int, geom geometry(Point, 4326));
CREATE TABLE loaded_part (id serial PRIMARY KEY, name text, n int, geom geometry(Point, 4326));
CREATE TABLE loaded_batch (id serial PRIMARY KEY, name text, n int, geom geometry(Point, 4326));
SQL
python3 - "$run/points.geojson" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    f.write('{"type":"FeatureCollection","features":[')
    f.write(",".join(json.dumps({"type": "Feature", "properties": {"name": f"pt {i}", "n": i},
                                 "geometry": {"type": "Point", "coordinates": [-10 + (i % 500) * 0.04, 35 + (i // 500) * 0.05]}})
                     for i in range(100000)))
    f.write("]}")
PY
made=$("$bin" api-key qgis --scope 'read:* write:*' 2>/dev/null)
key=$(printf '%s\n' "$made" | sed -n 2p)
printf '%s\n' "$made" | sed -n '/^\[api_keys/,$p' > "$run/auth.toml"
auth_port=$(free_port)
DATABASE_URL="postgres://postgres@127.0.0.1:$port/qgis" FEATUREPIPE_LISTEN=127.0.0.1:$auth_port \
    FEATUREPIPE_CONFIG=$run/auth.toml RUST_LOG=featurepipe=info,warn "$bin" serve > "$run/auth-service.log" 2>&1 &
others="$others $!"
for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$auth_port/readyz" >/dev/null && break; sleep 0.1; done
: > "$run/plugin-proxy.log"
plugin_port=$(free_port) slow_port=$(free_port)
python3 tests/qgis/logging_proxy.py "$plugin_port" "$auth_port" "$run/plugin-proxy.log" 0 "$run/control" 2> "$run/plugin-proxy.err" &
others="$others $!"
python3 tests/qgis/logging_proxy.py "$slow_port" "$auth_port" "$run/plugin-proxy.log" 50 "$run/control" 2> "$run/slow-proxy.err" &
others="$others $!"
for p in $plugin_port $slow_port; do
    for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$p/readyz" >/dev/null && break; sleep 0.1; done
done
: > "$run/plugin-proxy.log"
shot=${FEATUREPIPE_QGIS_SCREENSHOT:+$inside/conflict.png}
# The service's binary, for `featurepipe push` beside the algorithm.
cp "$bin" "$run/featurepipe"
qgis_run plugin_tests.py plugin "$inside/featurepipe.zip" "http://127.0.0.1:$plugin_port" \
    "http://127.0.0.1:$slow_port" "$inside/plugin-proxy.log" "$inside/control" "$key" \
    "http://127.0.0.1:$auth_port" "$inside/points.geojson" "$inside/featurepipe" $shot
plugin_rc=$qgis_rc presult=$result
if [ -n "$shot" ] && [ -f "$run/conflict.png" ]; then
    cp "$run/conflict.png" "$FEATUREPIPE_QGIS_SCREENSHOT"
fi
# `featurepipe push` of the same file, beside the Processing algorithm's load.
t_push0=$(date +%s.%N)
"$bin" push "$run/points.geojson" --collection pushed --url "http://127.0.0.1:$auth_port" --api-key "$key" > "$run/push.out" 2>&1
t_push1=$(date +%s.%N)
push_s=$(python3 -c "print(round($t_push1 - $t_push0, 3))")
pr() { r_of "$presult" "$1"; }
check "plugin: failures it saw" "[]" "$(pr 'r["failures"]')"
check "plugin: a table keyed by two columns, its features added, changed and deleted (the seed left)" "1 seed" \
    "$(q "SELECT count(*) || ' ' || string_agg(name, ',') FROM team_plain")"
check "plugin: rows inserted (1,000 + 1 fixed + 2 written once)" 1003 "$(q "SELECT count(*) FROM audit_sites.log WHERE op = 'INSERT'")"
check "plugin: rows deleted in one request (all but the seed)" "1003 1 seed" \
    "$(q "SELECT (SELECT count(*) FROM audit_sites.log WHERE op = 'DELETE') || ' ' || count(*) || ' ' || string_agg(name, ',') FROM sites")"
w="FROM audit_sites.log WHERE op"
check "plugin: empty names -> their default" 100 "$(q "SELECT count(*) $w = 'INSERT' AND name = 'unnamed'")"
check "plugin: empty kinds -> their default (as inserted)" 334 \
    "$(q "SELECT count(*) FROM audit_sites.log WHERE op = 'INSERT' AND kind = 'other' AND name NOT IN ('too low', 'written once', 'written once, after two 502s')")"
check "plugin: kinds changed" 1000 "$(q "SELECT count(DISTINCT id) $w = 'UPDATE' AND kind = 'changed'")"
check "plugin: the second client's change kept, QGIS's of it never written (the conflict)" "1 0" \
    "$(q "SELECT (SELECT count(*) $w = 'UPDATE' AND name = 'theirs') || ' ' || (SELECT count(*) $w = 'UPDATE' AND name = 'mine')")"
check "plugin: the other edit of the conflict, saved after the reload" 1 "$(q "SELECT count(*) $w = 'UPDATE' AND name = 'mine too'")"
check "plugin: the refused session wrote nothing, its fix all of it, once" "1 1" \
    "$(q "SELECT (SELECT count(*) $w = 'UPDATE' AND name = 'should wait') || ' ' || (SELECT count(*) $w = 'INSERT' AND name = 'too low')")"
check "plugin: the fixed feature" "5" "$(q "SELECT height $w = 'INSERT' AND name = 'too low'")"
check "plugin: the feature whose answer was lost, written once" 1 "$(q "SELECT count(*) FROM audit_sites.log WHERE op = 'INSERT' AND name = 'written once'")"
check "plugin: the feature whose answer was a 502 twice, written once" 1 \
    "$(q "SELECT count(*) FROM audit_sites.log WHERE op = 'INSERT' AND name = 'written once, after two 502s'")"
check "plugin: the moved feature" 1 "$(q "SELECT count(*) FROM audit_sites.log WHERE op = 'UPDATE' AND x = -3.5 AND y = 40.25")"
check "plugin: plain: 1,000 added, changed and deleted (the seed left)" "1 seed" "$(q "SELECT count(*) || ' ' || string_agg(name, ',') FROM plain")"
check "plugin: plain: the sequence drew 1,000 keys" 1001 "$(q "SELECT last_value FROM plain_id_seq")"
check "plugin: the Processing load" 100000 "$(q "SELECT count(*) FROM loaded")"
check "plugin: push of the same file" 100000 "$(q "SELECT count(*) FROM pushed")"
check "plugin: the Processing load in mode batch" 100000 "$(q "SELECT count(*) FROM loaded_batch")"
check "plugin: side by side, the algorithm's loads and push's" "500000 500000" "$(q "SELECT (SELECT count(*) FROM timed_load) || ' ' || (SELECT count(*) FROM timed_push)")"
check "plugin: the Processing load of 5,000 of them, in batches" "5000 4999" "$(q "SELECT count(*) || ' ' || max(n) FROM loaded_part")"
load_s=$(pr 'r.get("load", {}).get("seconds")')
echo "test-qgis: plugin: add $(pr 'r.get("add", {}).get("seconds")') s, change $(pr 'r.get("change", {}).get("seconds")') s, delete $(pr 'r.get("delete", {}).get("seconds")') s (1,000 features, 50 ms away, one request each; a table with an AFTER trigger); without a trigger: $(pr 'r.get("plain")'); load of 100,000 points $load_s s, push $push_s s; side by side (5 each, taking turns): $(pr 'r.get("side_by_side")')" >&2
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); [print(f"  {k}: {json.dumps(v)[:400]}") for k, v in r.items() if k not in ("messages",)]' "$run/plugin-result.json" >&2
cat "$checks" >&2
echo "test-qgis: chroot ready in $((t_chroot - t0)) s, QGIS ran $((t_done - t_qgis)) s, $(($(date +%s) - t0)) s in all" >&2
if grep -q '^FAIL' "$checks" || [ "$edits_rc" -ne 0 ] || [ "$plugin_rc" -ne 0 ]; then
    echo "test-qgis: FAILED ($(grep -c '^FAIL' "$checks") checks failed, qgis_edits.py exited $edits_rc, plugin_tests.py $plugin_rc)" >&2
    exit 1
fi
echo "test-qgis: passed ($(grep -c '^ok' "$checks") checks)" >&2
