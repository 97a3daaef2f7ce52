#!/usr/bin/env python3
"""QGIS 3.40 (headless) against featurepipe: edits, filters and a large read.

Run by scripts/test-qgis.sh inside the Debian trixie chroot of
scripts/qgis-chroot.sh, with the chroot's python3 and python3-qgis:

    qgis_edits.py BASE_URL PROXY_LOG FILTERS_JSON

BASE_URL is the logging proxy in front of the service (tests/qgis/logging_proxy.py);
PROXY_LOG is its log (one JSON line per request), read here to say which
requests each step took; FILTERS_JSON is a list of {"name", "qgis"} (the
shell script checks each count against the same filter in SQL).

Through QGIS's OAPIF provider (the one the "WFS / OGC API - Features" source
of the desktop uses): the layer `pois` is opened, 50 features are added in
one edit session (some fields left empty, i.e. NULL), each gets a changed
attribute, one is moved, all 50 are deleted, each a commit of its own; then
the layer `big` (2,500 features) is read whole, and with each filter as the
layer's subset string. The last line of stdout is `RESULT {json}`.
"""
import hashlib
import json
import re
import sys
import time
import traceback
from collections import Counter

from qgis.core import (
    Qgis,
    QgsApplication,
    QgsFeature,
    QgsGeometry,
    QgsPointXY,
    QgsProviderRegistry,
    QgsVectorDataProvider,
    QgsVectorLayer,
)
from qgis.PyQt.QtCore import QDate, QVariant

from harness import ProxyLog, check, failures

base_url, proxy_log, filters_path = sys.argv[1], sys.argv[2], sys.argv[3]
ADDED = 50
MOVED = 7  # the feature "qgis 7" is moved
MOVED_TO = (-70.25, -33.5)

app = QgsApplication([], False)
app.initQgis()
messages = []
QgsApplication.messageLog().messageReceived.connect(
    lambda message, tag, level: messages.append(f"[{tag}] {message}"))

result = {
    "qgis": Qgis.version(),
    "oapif_provider": "OAPIF" in QgsProviderRegistry.instance().providerList(),
}
log = ProxyLog(proxy_log)
mark, since = log.mark, log.since


def route(entry):
    """GET /collections/pois/items/12?f=json -> GET /collections/pois/items/{id}"""
    path = entry["target"].split("?", 1)[0]
    path = re.sub(r"/items/[^/]+$", "/items/{id}", path)
    return f'{entry["method"]} {path}'


def summary(entries):
    return dict(Counter(f'{route(e)} {e["status"]}' for e in entries))


def errors(entries):
    return [{k: e[k] for k in ("method", "target", "status", "error", "request_body") if k in e}
            for e in entries if e["status"] >= 400]


def commit(layer, step):
    t = time.monotonic()
    ok = layer.commitChanges()
    secs = round(time.monotonic() - t, 2)
    if not ok:
        print(f"commitChanges() failed at {step}:", layer.commitErrors(), flush=True)
        layer.rollBack()
    check(ok, f"{step}: commitChanges() returned True")
    return ok, secs, [] if ok else list(layer.commitErrors())


def open_layer(typename):
    uri = f"url='{base_url}' typename='{typename}'"
    layer = QgsVectorLayer(uri, typename, "OAPIF")
    check(layer.isValid(), f"{typename}: layer is valid ({uri})")
    return layer


def our_features(layer):
    """The features this script added: every feature but the seed, by QGIS feature id."""
    out = {}
    for f in layer.getFeatures():
        g = f.geometry()
        if g.isNull() or f["name"] == "seed":
            continue
        out[f.id()] = f
    return out


def names_digest(names):
    """sha256 of the sorted names, one a line: the shell script compares it with SQL's."""
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()


def edits():
    start = mark()
    layer = open_layer("pois")
    result["pois_opening_requests"] = summary(since(start))
    if not layer.isValid():
        return
    caps = layer.dataProvider().capabilities()
    result["pois_fields"] = [f"{f.name()}:{f.typeName()}" for f in layer.fields()]
    result["pois_capabilities"] = {
        "add": bool(caps & QgsVectorDataProvider.AddFeatures),
        "change_attributes": bool(caps & QgsVectorDataProvider.ChangeAttributeValues),
        "change_geometries": bool(caps & QgsVectorDataProvider.ChangeGeometries),
        "delete": bool(caps & QgsVectorDataProvider.DeleteFeatures),
    }
    check(all(result["pois_capabilities"].values()), "pois: QGIS sees add, change and delete capabilities")
    fields = layer.fields()
    visited_is_date = fields.field("visited").type() == QVariant.Date if fields.indexOf("visited") >= 0 else False
    for name in ("name", "kind", "height", "visited"):
        check(fields.indexOf(name) >= 0, f"pois: QGIS shows the field {name}")
    if failures:
        return

    # 1. Add 50 features in one edit session, some fields left empty.
    start = mark()
    layer.startEditing()
    feats = []
    for i in range(ADDED):
        f = QgsFeature(fields)
        f.setAttribute("name", None if i % 5 == 0 else f"qgis {i}")
        f.setAttribute("kind", None if i % 3 == 0 else ("shop", "cafe")[i % 2])
        f.setAttribute("height", None if i % 4 == 0 else i * 1.5)
        if i % 2 == 0:
            day = QDate(2024, 3, 1 + i % 28)
            f.setAttribute("visited", day if visited_is_date else day.toString("yyyy-MM-dd"))
        else:
            f.setAttribute("visited", None)
        f.setGeometry(QgsGeometry.fromPointXY(QgsPointXY(10 + i * 0.01, 45 + i * 0.01)))
        feats.append(f)
    check(layer.addFeatures(feats), "add: addFeatures() returned True")
    ok, secs, errs = commit(layer, "add")
    reqs = since(start)
    shown = our_features(layer)
    result["add"] = {
        "committed": ok, "seconds": secs, "commit_errors": errs,
        "requests": summary(reqs), "http_errors": errors(reqs),
        "features_shown": len(shown),
        # What QGIS shows after the commit (it reads each new feature back).
        "names_unnamed_shown": sum(1 for f in shown.values() if f["name"] == "unnamed"),
        "kinds_other_shown": sum(1 for f in shown.values() if f["kind"] == "other"),
    }
    check(ok and len(shown) == ADDED, f"add: QGIS shows {ADDED} new features (shows {len(shown)})")
    if not ok:
        return

    # 2. Change two attributes of each feature.
    start = mark()
    layer.startEditing()
    kind_idx, height_idx = fields.indexOf("kind"), fields.indexOf("height")
    for fid, f in shown.items():
        layer.changeAttributeValue(fid, kind_idx, "changed")
        layer.changeAttributeValue(fid, height_idx, 99.25)
    ok, secs, errs = commit(layer, "change")
    reqs = since(start)
    shown = our_features(layer)
    result["change"] = {
        "committed": ok, "seconds": secs, "commit_errors": errs,
        "requests": summary(reqs), "http_errors": errors(reqs),
        "kinds_changed_shown": sum(1 for f in shown.values() if f["kind"] == "changed"),
    }
    check(result["change"]["kinds_changed_shown"] == ADDED, "change: QGIS shows every kind changed")

    # 3. Move one feature.
    start = mark()
    moved = [fid for fid, f in shown.items() if f["name"] == f"qgis {MOVED}"]
    check(len(moved) == 1, f"move: one feature named 'qgis {MOVED}'")
    if moved:
        layer.startEditing()
        layer.changeGeometry(moved[0], QgsGeometry.fromPointXY(QgsPointXY(*MOVED_TO)))
        ok, secs, errs = commit(layer, "move")
        reqs = since(start)
        got = layer.getFeature(moved[0]).geometry().asPoint()
        result["move"] = {
            "committed": ok, "seconds": secs, "commit_errors": errs,
            "requests": summary(reqs), "http_errors": errors(reqs),
            "shown_at": [got.x(), got.y()],
        }

    # 4. Delete them all.
    start = mark()
    layer.startEditing()
    check(layer.deleteFeatures(list(shown)), "delete: deleteFeatures() returned True")
    ok, secs, errs = commit(layer, "delete")
    reqs = since(start)
    layer.reload()
    left = our_features(layer)
    result["delete"] = {
        "committed": ok, "seconds": secs, "commit_errors": errs,
        "requests": summary(reqs), "http_errors": errors(reqs),
        "features_left_shown": len(left),
    }
    check(len(left) == 0, f"delete: QGIS shows none of the features left ({len(left)})")


def composite_key_edits():
    """team_pois, keyed by (team, id): QGIS adds three features (teams with a
    comma and a percent sign among them), changes each and deletes them, by
    their ids (`north,2`, `a~2Cb,3`), each a commit of its own; a layer
    opened afresh after each shows what the service holds."""
    layer = open_layer("team_pois")
    if not layer.isValid():
        return
    fields = layer.fields()
    teams = ["north", "a,b", "100%"]
    start = mark()
    layer.startEditing()
    feats = []
    for i, team in enumerate(teams):
        f = QgsFeature(fields)
        f.setAttribute("team", team)
        f.setAttribute("name", f"team {i}")
        f.setGeometry(QgsGeometry.fromPointXY(QgsPointXY(1 + i, 1 + i)))
        feats.append(f)
    check(layer.addFeatures(feats), "team_pois add: addFeatures() returned True")
    steps = {"add": commit(layer, "team_pois add")[0]}

    def held():
        fresh = open_layer("team_pois")
        return sorted((f["team"], f["name"]) for f in fresh.getFeatures() if f["name"] != "seed")

    check(held() == sorted((t, f"team {i}") for i, t in enumerate(teams)), f"team_pois add: the service holds them ({held()})")
    layer.startEditing()
    name_idx = fields.indexOf("name")
    ours = [f for f in layer.getFeatures() if f["name"] != "seed"]
    for f in ours:
        layer.changeAttributeValue(f.id(), name_idx, f["name"] + " changed")
    steps["change"] = commit(layer, "team_pois change")[0]
    check(held() == sorted((t, f"team {i} changed") for i, t in enumerate(teams)),
          f"team_pois change: the service holds the changes ({held()})")
    layer.startEditing()
    check(layer.deleteFeatures([f.id() for f in ours]), "team_pois delete: deleteFeatures() returned True")
    steps["delete"] = commit(layer, "team_pois delete")[0]
    check(held() == [], f"team_pois delete: none left ({held()})")
    reqs = since(start)
    result["team_pois"] = {"committed": steps, "ids": sorted(str(f.attribute("id")) for f in ours),
                           "requests": summary(reqs), "http_errors": errors(reqs)}


def big_read_and_filters():
    start = mark()
    layer = open_layer("big")
    if not layer.isValid():
        return
    opened = since(start)
    start = mark()
    t = time.monotonic()
    names = set()
    n = 0
    for f in layer.getFeatures():
        n += 1
        names.add(f["name"])
    secs = round(time.monotonic() - t, 2)
    reqs = since(start)
    pages = [e for e in reqs if e["method"] == "GET" and route(e) == "GET /collections/big/items"]
    result["big"] = {
        "features_read": n,
        "distinct_names": len(names),
        "feature_count": layer.featureCount(),
        "seconds": secs,
        "opening_requests": summary(opened),
        "item_pages": len(pages),
        "item_page_targets": [e["target"] for e in pages],
        "requests": summary(reqs),
    }
    check(n == 2500 and len(names) == 2500, f"big: read all 2,500 features ({n}, {len(names)} distinct)")
    # The page size QGIS chose (from /api's limit parameter) and the pages it read.
    limits = sorted({int(m.group(1)) for e in pages for m in [re.search(r"[?&]limit=(\d+)", e["target"])] if m})
    result["big"]["page_limits"] = limits

    with open(filters_path, encoding="utf-8") as f:
        filters = json.load(f)
    result["filters"] = {}
    for flt in filters:
        start = mark()
        ok = layer.setSubsetString(flt["qgis"])
        names = [f["name"] for f in layer.getFeatures()]
        count = layer.featureCount()
        reqs = since(start)
        sent = sorted({e["target"] for e in reqs if "filter=" in e["target"]})
        result["filters"][flt["name"]] = {
            "qgis": flt["qgis"],
            "accepted": ok,
            "features_shown": len(names),
            "distinct": len(set(names)),
            "names_sha256": names_digest(names),
            "feature_count": count,
            "requests": summary(reqs),
            "http_errors": errors(reqs),
            # Each distinct request target that carried filter=, as QGIS sent it.
            "filter_targets": sent,
        }
        check(ok, f"filter {flt['name']}: setSubsetString accepted")
    layer.setSubsetString("")


try:
    edits()
    composite_key_edits()
    big_read_and_filters()
except Exception:
    traceback.print_exc()
    failures.append("exception: " + traceback.format_exc().splitlines()[-1])
QgsApplication.processEvents()
result["messages"] = messages[-50:]
result["failures"] = failures
print("RESULT " + json.dumps(result), flush=True)
app.exitQgis()
sys.exit(1 if failures else 0)
