"""20,000 points: featurepipe's POST beside a raw binary COPY (psycopg) into
the same distributed table, interleaved (scripts/citus-bench.sh): the raw
COPY with Citus's defaults, and with one connection a worker
(`citus.max_adaptive_executor_pool_size = 1`), as featurepipe's connections
have it. Then the same into a table distributed by a tenant column, keyed
by it and the id (`PRIMARY KEY (team, id)`), beside the raw COPY with one
connection a worker.

    citus_bench.py SERVICE_URL DATABASE_URL SCHEMA ROUNDS
"""
import json
import statistics
import struct
import sys
import time
import urllib.request

import psycopg
base, dsn, schema, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
N = 20000
feats = [{"type": "Feature", "geometry": {"type": "Point", "coordinates": [i * 1e-4, 1.0]}, "properties": {"name": f"b{i}", "height": 1.5}} for i in range(N)]
body = json.dumps({"type": "FeatureCollection", "features": feats}).encode()
# EWKB points with SRID 4326, which PostGIS takes as its binary input.
rows = [(f"b{i}", 1.5, struct.pack("<BIIdd", 1, 0x20000001, 4326, i * 1e-4, 1.0)) for i in range(N)]
TEAMS = 8
team_body = json.dumps({"type": "FeatureCollection", "features": [
    dict(f, properties=dict(f["properties"], team=i % TEAMS)) for i, f in enumerate(feats)]}).encode()
team_rows = [(i % TEAMS,) + row for i, row in enumerate(rows)]
conn = psycopg.connect(dsn, autocommit=True)
one = psycopg.connect(dsn, autocommit=True)
one.execute("SET citus.max_adaptive_executor_pool_size = 1")
def post(collection="sites", body=body):
    r = urllib.request.Request(f"{base}/collections/{collection}/items", data=body, method="POST", headers={"Content-Type": "application/geo+json"})
    t = time.monotonic(); d = json.load(urllib.request.urlopen(r)); e = time.monotonic() - t
    assert d["strategy"] == "copy" and len(d["ids"]) == N, d.get("strategy")
    return e
def raw(conn=conn, table="sites", columns=("name", "height", "geom"), rows=rows):
    t = time.monotonic()
    with conn.cursor() as cur:
        with cur.copy(f"COPY {schema}.{table} ({', '.join(columns)}) FROM STDIN (FORMAT binary)") as copy:
            copy.set_types(["int4", "text", "float8", "bytea"][4 - len(columns):])
            for row in rows:
                copy.write_row(row)
    return time.monotonic() - t
def post_team():
    return post("team_sites", team_body)
def raw_team():
    return raw(one, "team_sites", ("team", "name", "height", "geom"), team_rows)
post(); raw(); raw(one); post_team(); raw_team()  # warm
p, c, o, tp, to = [], [], [], [], []
for _ in range(rounds):
    p.append(post()); c.append(raw()); o.append(raw(one)); tp.append(post_team()); to.append(raw_team())
mp, mc, mo = statistics.median(p), statistics.median(c), statistics.median(o)
mtp, mto = statistics.median(tp), statistics.median(to)
print(f"featurepipe POST: median {mp:.3f} s ({N/mp:.0f} rows/s) {[round(x,3) for x in p]}")
print(f"raw binary COPY (psycopg), Citus's defaults: median {mc:.3f} s ({N/mc:.0f} rows/s) {[round(x,3) for x in c]}")
print(f"raw binary COPY (psycopg), one connection a worker: median {mo:.3f} s ({N/mo:.0f} rows/s) {[round(x,3) for x in o]}")
print(f"featurepipe at {100*mc/mp:.0f}% of raw COPY's rows/s with Citus's defaults, {100*mo/mp:.0f}% with one connection a worker")
print(f"by tenant: featurepipe POST: median {mtp:.3f} s ({N/mtp:.0f} rows/s) {[round(x,3) for x in tp]}")
print(f"by tenant: raw binary COPY (psycopg), one connection a worker: median {mto:.3f} s ({N/mto:.0f} rows/s) {[round(x,3) for x in to]}")
print(f"by tenant: featurepipe at {100*mto/mtp:.0f}% of raw COPY's rows/s with one connection a worker")
