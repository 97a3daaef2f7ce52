#!/usr/bin/env python3
"""The featurepipe QGIS plugin in real QGIS 3.40, headless.

Run by scripts/test-qgis.sh inside the Debian trixie chroot, with a clean
QGIS profile ($HOME is the run's own):

    plugin_tests.py PLUGIN_ZIP URL SLOW_URL PROXY_LOG CONTROL API_KEY DIRECT_URL GEOJSON [SCREENSHOT]

URL is a logging proxy in front of a featurepipe service with
authentication on (API_KEY may write); SLOW_URL the same service 50 ms
away (a proxy that holds each request and each new connection one round
trip); PROXY_LOG their log (one JSON line per request); CONTROL a file the
proxy reads (`drop-answer N` or `bad-gateway N`: the next N POST
/transactions are forwarded and their answers dropped, or replaced by a
502); DIRECT_URL the service itself, as a second client
that edits behind QGIS's back; GEOJSON 100,000 points for the Processing
algorithm. The plugin is installed from its ZIP into the profile, loaded as
QGIS loads plugins, and driven through Save Layer Edits (commitChanges())
and its own functions. The shell script checks the tables with psql. The
last line of stdout is `RESULT {json}`.
"""
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
import urllib.request
import zipfile

from qgis.core import (
    Qgis,
    QgsApplication,
    QgsFeature,
    QgsGeometry,
    QgsPointXY,
    QgsProcessingFeatureSourceDefinition,
    QgsProject,
    QgsVectorLayer,
)

from harness import ProxyLog, check, failures

plugin_zip, url, slow_url, proxy_log, control, api_key, direct_url, geojson, push_bin = sys.argv[1:10]
screenshot = sys.argv[10] if len(sys.argv) > 10 else ""
# Loads by the algorithm and by `featurepipe push`, interleaved, for the figures.
SIDE_BY_SIDE_RUNS = 5

app = QgsApplication([], True)
app.initQgis()
result = {"qgis": Qgis.version()}
log = ProxyLog(proxy_log)
mark, since = log.mark, log.since


def direct(method, path, body=None, headers=None):
    """A second client, straight to the service: (status, headers, JSON)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(direct_url + path, data=data, method=method,
                                     headers={"X-API-Key": api_key, "Content-Type": "application/json",
                                              **(headers or {})})
    try:
        with urllib.request.urlopen(request) as r:
            return r.status, dict(r.headers), json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read() or b"null")


# 1. Install the ZIP into the clean profile, and load it as QGIS does.
from qgis.PyQt.QtWidgets import QMainWindow  # noqa: E402
from qgis.gui import QgsMessageBar  # noqa: E402
import qgis.utils  # noqa: E402

plugins_dir = os.path.join(QgsApplication.qgisSettingsDirPath(), "python", "plugins")
os.makedirs(plugins_dir, exist_ok=True)
check(not os.path.exists(os.path.join(plugins_dir, "featurepipe")), "the profile is clean")
with zipfile.ZipFile(plugin_zip) as z:
    z.extractall(plugins_dir)
sys.path.insert(0, plugins_dir)
sys.path.insert(0, "/usr/share/qgis/python/plugins")  # Processing
qgis.utils.plugin_paths = [plugins_dir]
qgis.utils.updateAvailablePlugins()
result["plugin_metadata"] = {k: qgis.utils.pluginMetadata("featurepipe", k)
                             for k in ("name", "version", "qgisMinimumVersion")}
check(result["plugin_metadata"]["name"] == "featurepipe", "the ZIP's metadata names the plugin")


class Iface:
    """What the plugin asks of QGIS's interface, headless."""

    def __init__(self):
        self.window = QMainWindow()
        self.bar = QgsMessageBar()
        self.menus = []
        self.messages = []
        self.bar.widgetAdded.connect(lambda item: self.messages.append(item.text()))

    def mainWindow(self):  # noqa: N802
        return self.window

    def mapCanvas(self):  # noqa: N802 (Processing asks for it)
        return None

    def messageBar(self):  # noqa: N802
        return self.bar

    def addPluginToWebMenu(self, menu, action):  # noqa: N802
        self.menus.append(action.text())

    def removePluginWebMenu(self, menu, action):  # noqa: N802
        self.menus.remove(action.text())


iface = Iface()
qgis.utils.iface = iface
import processing  # noqa: E402
from processing.core.Processing import Processing  # noqa: E402

Processing.initialize()
check(qgis.utils.loadPlugin("featurepipe"), "QGIS loads the plugin")
check(qgis.utils.startPlugin("featurepipe"), "QGIS starts the plugin")
plugin = qgis.utils.plugins.get("featurepipe")
result["menu"] = iface.menus
check(QgsApplication.processingRegistry().algorithmById("featurepipe:load") is not None,
      "the Processing algorithm is registered")

from featurepipe import connections, edits, load_algorithm, split  # noqa: E402

saver = plugin.saver
# Conflict dialogs and problem messages are the GUI's; here the outcomes are read.
shown = []
saver.on_outcome = lambda layer, outcome: shown.append(outcome)


def commit(layer):
    """Save Layer Edits, as the toolbar's button does: (ok, seconds, outcome)."""
    t = time.monotonic()
    ok = layer.commitChanges()
    secs = round(time.monotonic() - t, 3)
    QgsApplication.processEvents()
    saver.finish_all()
    return ok, secs, saver.outcomes.get(layer.id())


def requests_of(entries):
    return [f'{e["method"]} {e["target"].split("?")[0]} {e["status"]}' for e in entries]


def features_by_key(layer, key="id"):
    return {f[key]: f for f in layer.getFeatures()}


def run():
    # 2. Connect: the key in QGIS's authentication database, the collections listed.
    manager = QgsApplication.authManager()
    check(manager.setMasterPassword("featurepipe-test", True), "the auth database's master password is set")
    authcfg = connections.store_credentials("test", api_key=api_key)
    check(bool(authcfg), "the API key is stored in QGIS's authentication database")
    listed = dict(connections.collections(url, authcfg))
    result["collections"] = sorted(listed)
    check("sites" in listed, "the service's collections are listed with the stored key")
    try:
        connections.collections(url, "")
        denied = False
    except RuntimeError as e:
        denied = "401" in str(e) or "credential" in str(e).lower()
    check(denied, "without the key the service refuses (401)")
    connections.save("test", url, authcfg)
    check(connections.saved().get("test") == (url, authcfg), "the connection is remembered")
    # The connect dialog, as a user fills it in: a key of its own, the collections listed.
    from featurepipe.plugin import ConnectDialog

    dialog = ConnectDialog(iface.mainWindow())
    dialog.url.setText(url)
    dialog.api_key.setText(api_key)
    dialog.list_collections()
    listed = [dialog.collections.item(i).text() for i in range(dialog.collections.count())]
    result["dialog_collections"] = listed
    check(any("(sites)" in t for t in listed) and bool(dialog.authcfg),
          f"the connect dialog lists the collections with the key it stored ({listed})")
    dialog.close()

    layer = connections.layer(slow_url, "sites", authcfg)
    check(layer.isValid(), "the collection opens as a layer")
    QgsProject.instance().addMapLayer(layer)
    check(layer.id() in saver.watched, "the plugin watches the featurepipe layer")
    fields = layer.fields()
    result["fields"] = fields.names()
    check("label" in fields.names(), "QGIS shows the generated column (read-only)")

    # 3. 1,000 points added, 50 ms from the service: one request.
    layer.startEditing()
    added = []
    for i in range(1000):
        f = QgsFeature(fields)
        f.setAttribute("name", None if i % 10 == 0 else f"p{i}")
        f.setAttribute("kind", None if i % 3 == 0 else "shop")
        f.setAttribute("height", float(i))
        f.setAttribute("label", "never sent")
        f.setGeometry(QgsGeometry.fromPointXY(QgsPointXY(5 + i * 0.001, 50 + i * 0.001)))
        added.append(f)
    layer.addFeatures(added)
    start = mark()
    ok, secs, outcome = commit(layer)
    sent = since(start)
    ids = sorted(outcome.new_ids.values()) if outcome else []
    result["add"] = {"ok": ok, "seconds": secs, "requests": requests_of(sent), "kind": outcome and outcome.kind,
                     "ids": len(ids), "distinct": len(set(ids)), "timing": outcome and outcome.timing}
    check(ok and outcome.kind == "saved", f"add: saved ({outcome})")
    check(requests_of(sent) == ["POST /transactions 200"], f"add: one request ({requests_of(sent)})")
    check(secs <= 0.5, f"add: 1,000 points saved in {secs} s 50 ms away")
    check(len(set(ids)) == 1000, "add: 1,000 new keys in the answer")
    body = sent[0].get("request_body", "") if sent else ""
    check('"label"' not in body and '"featurepipe:etag"' not in body, "add: read-only fields are not sent")
    result["add"]["headers"] = sent[0].get("headers", {}) if sent else {}
    check("idempotency-key" in result["add"]["headers"], "add: sent with an Idempotency-Key")
    check(result["add"]["headers"].get("content-crs") == f"<{edits.CRS84}>", "add: Content-Crs says CRS84")
    # What QGIS shows now: the saved features, with the keys of the answer.
    start = mark()
    now = features_by_key(layer)
    reread = since(start)
    mine = {k: f for k, f in now.items() if f["name"] != "seed"}
    result["add"]["shown"] = len(mine)
    result["add"]["reread"] = requests_of(reread)
    check(sorted(mine) == ids, "add: QGIS shows the saved features with the answer's keys")
    check(sum(1 for f in mine.values() if f["name"] == "unnamed") == 100, "add: empty names got their default")
    check(all(r.startswith("GET /collections/sites/items ") for r in requests_of(reread)),
          f"add: QGIS reads the layer's pages again, not each feature ({requests_of(reread)[:5]})")

    # 4. 1,000 changed (attributes, and one geometry): one request.
    layer.startEditing()
    kind = fields.indexOf("kind")
    for f in mine.values():
        layer.changeAttributeValue(f.id(), kind, "changed")
    moved = mine[ids[7]]
    layer.changeGeometry(moved.id(), QgsGeometry.fromPointXY(QgsPointXY(-3.5, 40.25)))
    start = mark()
    ok, secs, outcome = commit(layer)
    sent = since(start)
    result["change"] = {"ok": ok, "seconds": secs, "requests": requests_of(sent), "kind": outcome.kind,
                        "timing": outcome.timing}
    check(ok and outcome.kind == "saved", f"change: saved ({outcome})")
    check(requests_of(sent) == ["POST /transactions 200"], f"change: one request ({requests_of(sent)})")
    check(secs <= 0.5, f"change: 1,000 features saved in {secs} s 50 ms away")
    check("label" not in (sent[0].get("request_body", "") if sent else "label"), "change: read-only fields never sent")
    now = features_by_key(layer)
    check(sum(1 for k in ids if now[k]["kind"] == "changed") == 1000, "change: QGIS shows every kind changed")
    got = now[ids[7]].geometry().asPoint()
    result["change"]["moved_to"] = [got.x(), got.y()]

    # 5. A second client changes a feature; QGIS changes it and another: 412, nothing written.
    victim, other = now[ids[1]], now[ids[2]]
    status, _, _ = direct("PATCH", f"/collections/sites/items/{ids[1]}",
                          {"properties": {"name": "theirs"}}, {"Content-Type": "application/merge-patch+json"})
    check(status in (200, 204), f"conflict: the second client's PATCH ({status})")
    layer.startEditing()
    name = fields.indexOf("name")
    layer.changeAttributeValue(victim.id(), name, "mine")
    layer.changeAttributeValue(other.id(), name, "mine too")
    start = mark()
    ok, secs, outcome = commit(layer)
    sent = since(start)
    result["conflict"] = {"kind": outcome.kind, "requests": requests_of(sent),
                          "conflicts": [(c.key, (c.current or {}).get("properties", {}).get("name"))
                                        for c in outcome.conflicts],
                          "kept": layer.isEditable() and layer.isModified()}
    check(outcome.kind == "conflict", f"conflict: a 412 ({outcome})")
    check(result["conflict"]["conflicts"] == [(ids[1], "theirs")], "conflict: it names the feature, with their version")
    check(result["conflict"]["kept"], "conflict: the edits are kept")
    if screenshot:
        from featurepipe.plugin import ConflictDialog

        dialog = ConflictDialog(layer, outcome, saver, iface.mainWindow())
        dialog.resize(640, 300)
        dialog.show()
        QgsApplication.processEvents()
        dialog.grab().save(screenshot)
        dialog.close()
    saver.reload_conflicting(layer, outcome)
    now = features_by_key(layer)
    check(now[ids[1]]["name"] == "theirs", "conflict: reloaded, QGIS shows their version")
    pending = layer.editBuffer().changedAttributeValues() if layer.isEditable() else {}
    check(any(v.get(name) == "mine too" for v in pending.values()), "conflict: the other edit is still to save")
    ok, secs, outcome = commit(layer)
    check(ok and outcome.kind == "saved", f"conflict: the rest saved after the reload ({outcome})")

    # 6. A 422: a negative height (a CHECK) and a changed feature: nothing written, edits kept.
    now = features_by_key(layer)
    layer.startEditing()
    bad = QgsFeature(fields)
    bad.setAttribute("name", "too low")
    bad.setAttribute("height", -5.0)
    bad.setGeometry(QgsGeometry.fromPointXY(QgsPointXY(1, 1)))
    layer.addFeature(bad)
    layer.changeAttributeValue(now[ids[3]].id(), name, "should wait")
    ok, secs, outcome = commit(layer)
    result["invalid"] = {"kind": outcome.kind, "problems": [p.as_dict() for p in outcome.problems]}
    check(outcome.kind == "invalid", f"invalid: refused ({outcome})")
    problem = outcome.problems[0] if outcome.problems else None
    check(problem is not None and problem.field == "height", "invalid: the problem is at the field height")
    at = layer.getFeature(problem.fid) if problem and problem.fid is not None else None
    check(at is not None and at.isValid() and at["name"] == "too low", "invalid: and at the feature, in the kept buffer")
    check(layer.isModified(), "invalid: the edits are kept")
    if at is not None and at.isValid():
        layer.changeAttributeValue(at.id(), fields.indexOf("height"), 5.0)
    ok, secs, outcome = commit(layer)
    check(ok and outcome.kind == "saved", f"invalid: fixed, then saved ({outcome})")

    # 7. The answer lost after the commit: sent again with the same key, written once.
    def save_losing(name, x, control_word):
        """Save one added feature `name` while the proxy loses its answer as
        `control_word` says: (outcome, the requests sent, their keys)."""
        layer.startEditing()
        feature = QgsFeature(fields)
        feature.setAttribute("name", name)
        feature.setGeometry(QgsGeometry.fromPointXY(QgsPointXY(x, x)))
        layer.addFeature(feature)
        with open(control, "w") as c:
            c.write(control_word)
        start = mark()
        _, _, outcome = commit(layer)
        sent = since(start)
        return outcome, sent, [e.get("headers", {}).get("idempotency-key") for e in sent]

    # The connection closed after the request went out: Qt itself sends
    # it again (on a new connection, as it does for a reused one).
    outcome, sent, keys = save_losing("written once", 2, "drop-answer 1")
    result["lost"] = {"kind": outcome.kind, "requests": requests_of(sent), "retries": getattr(outcome, "retries", 0)}
    check(outcome.kind == "saved", f"lost: saved after a retry ({outcome})")
    check(len(sent) >= 2 and len(set(keys)) == 1, f"lost: sent again with the same Idempotency-Key ({keys})")
    # Twice a gateway's 502 after the service committed: the plugin sends it
    # again itself, with the same key, and the service answers what it wrote.
    outcome, sent, keys = save_losing("written once, after two 502s", 3, "bad-gateway 2")
    result["lost_502"] = {"kind": outcome.kind, "requests": requests_of(sent), "retries": getattr(outcome, "retries", 0)}
    check(outcome.kind == "saved" and outcome.retries == 2, f"502: saved after two retries of its own ({outcome})")
    check(len(sent) == 3 and len(set(keys)) == 1, f"502: three sends, one Idempotency-Key ({keys})")

    # 8. Every feature but the seed deleted, 50 ms from the service: one request.
    slow = connections.layer(slow_url, "sites", authcfg, "sites (again)")
    QgsProject.instance().addMapLayer(slow)
    doomed = [f.id() for f in slow.getFeatures() if f["name"] != "seed"]
    slow.startEditing()
    slow.deleteFeatures(doomed)
    start = mark()
    ok, secs, outcome = commit(slow)
    sent = since(start)
    result["delete"] = {"ok": ok, "seconds": secs, "requests": requests_of(sent), "kind": outcome.kind,
                        "deleted": len(doomed), "shown_after": slow.featureCount(), "timing": outcome.timing}
    check(ok and outcome.kind == "saved", f"delete: saved ({outcome})")
    check(requests_of(sent) == ["POST /transactions 200"], f"delete: one request ({requests_of(sent)})")
    check(len(list(slow.getFeatures())) == 1, "delete: QGIS shows the seed alone")

    # 9. The same three saves on a table without a trigger (most are): the figures of docs/qgis-plugin.md.
    plain = connections.layer(slow_url, "plain", authcfg)
    QgsProject.instance().addMapLayer(plain)
    pfields = plain.fields()
    plain.startEditing()
    for i in range(1000):
        f = QgsFeature(pfields)
        f.setAttribute("name", f"plain {i}")
        f.setGeometry(QgsGeometry.fromPointXY(QgsPointXY(i * 0.001, 1)))
        plain.addFeature(f)
    timed = {}
    ok, timed["add"], outcome = commit(plain)
    check(ok and outcome.kind == "saved", f"plain: add saved ({outcome})")
    plain.startEditing()
    pkind = pfields.indexOf("kind")
    for f in plain.getFeatures():
        if f["name"] != "seed":
            plain.changeAttributeValue(f.id(), pkind, "changed")
    ok, timed["change"], outcome = commit(plain)
    check(ok and outcome.kind == "saved", f"plain: change saved ({outcome})")
    plain.startEditing()
    plain.deleteFeatures([f.id() for f in plain.getFeatures() if f["name"] != "seed"])
    ok, timed["delete"], outcome = commit(plain)
    check(ok and outcome.kind == "saved", f"plain: delete saved ({outcome})")
    result["plain"] = timed

    # 9b. A table keyed by two columns (team, id): the same saves, each one
    # request, its features named by their ids (`featurepipe:id`).
    teams = connections.layer(slow_url, "team_plain", authcfg)
    QgsProject.instance().addMapLayer(teams)
    tfields = teams.fields()
    check(tfields.indexOf("featurepipe:id") >= 0, f"team_plain: the layer has featurepipe:id ({tfields.names()})")
    teams.startEditing()
    for i, team in enumerate(["north", "a,b", "100%"]):
        f = QgsFeature(tfields)
        f.setAttribute("team", team)
        f.setAttribute("name", f"team {i}")
        f.setGeometry(QgsGeometry.fromPointXY(QgsPointXY(i, 2)))
        teams.addFeature(f)
    ok, _, outcome = commit(teams)
    check(ok and outcome.kind == "saved", f"team_plain: add saved ({outcome})")
    ours = lambda: sorted((f["featurepipe:id"], f["name"]) for f in teams.getFeatures() if f["name"] != "seed")
    added = ours()
    check([i.split(",")[0] for i, _ in added] == ["100~25", "a~2Cb", "north"], f"team_plain: QGIS shows their ids ({added})")
    teams.startEditing()
    tname = tfields.indexOf("name")
    for f in teams.getFeatures():
        if f["name"] != "seed":
            teams.changeAttributeValue(f.id(), tname, f["name"] + " changed")
    start = mark()
    ok, _, outcome = commit(teams)
    sent = since(start)
    check(ok and outcome.kind == "saved", f"team_plain: change saved ({outcome})")
    check(requests_of(sent) == ["POST /transactions 200"], f"team_plain: change in one request ({requests_of(sent)})")
    check(ours() == [(i, n + " changed") for i, n in added], f"team_plain: QGIS shows the changes ({ours()})")
    teams.startEditing()
    teams.deleteFeatures([f.id() for f in teams.getFeatures() if f["name"] != "seed"])
    ok, _, outcome = commit(teams)
    check(ok and outcome.kind == "saved", f"team_plain: delete saved ({outcome})")
    check(ours() == [], f"team_plain: QGIS shows the seed alone ({ours()})")

    # 10. The file's own bytes, cut between its features (split, called
    # directly): whole features in each run, whatever the strings hold.
    feature = b'{"type":"Feature","properties":{"a":[1,{"b":2}]},"geometry":{"type":"Point","coordinates":[1,2]}}'
    odd = b'{"type":"Feature","properties":{"s":"}{][ \\" \\\\","t":"\\u00e9]"},"geometry":null}'
    cases = {
        "spaced, a member after": (b'{ "type" : "FeatureCollection" ,\n "features" : [\n' + b' ,\n'.join([feature] * 5)
                                   + b'\n ] , "crs": {"properties": {"name": "x"}, "type": "name"} }\n'),
        "empty": b'{"type":"FeatureCollection","features":[ ]}',
        "a key named features inside": (b'{"meta":{"features":[9]},"type":"FeatureCollection","features":['
                                        + b','.join([feature] * 3) + b']}'),
        "objects in a member after": (b'{"type":"FeatureCollection","features":[' + b','.join([feature] * 3)
                                      + b'],"other":[{"a":1},{"b":2},{"c":[{}]}]}'),
        "brackets, quotes and escapes in strings": (b'{"x":"{[","name":"features","features":['
                                                    + b','.join([feature, odd, odd, feature, odd]) + b']}'),
    }
    for name, body in cases.items():
        for size in (1, 50, 100, 250, 10 << 20):
            start = split.splittable(body)
            runs = list(split.feature_runs(body, start, size))
            features = [f for a, e in runs for f in json.loads(split.batch(body, a, e))["features"]]
            check(features == json.loads(body)["features"] and None not in [e for _, e in runs[:-1]]
                  and (size > 50 or len(runs) >= len(features) - 1),
                  f"split: {name}, runs of {size} bytes, are the file's features")
    for body in (b'[1]', b'{"a":{"features":[]}}', b'{"features":null}', b'{"a":"\\"features\\":["}'):
        check(split.splittable(body) is None, f"split: no features array in {body!r}")
    # Elements that are not objects: no feature's end found, the rest sent
    # whole (the service names the element it refuses).
    check(list(split.feature_runs(b'{"features":[1,2]}', 13, 1)) == [(13, None)],
          "split: elements that are not objects are not cut")
    # How many features a 201 lists, without parsing its ids.
    listed = {b'{"strategy":"copy","ids":[7,-8,9],"batches":[]}': 3, b'{"strategy":"copy","ids":[],"batches":[]}': 0,
              b'{"strategy":"insert","ids":["a,b","c]"],"batches":[]}': 2}
    check(all(load_algorithm.ids_listed(b) == n for b, n in listed.items()), "load: the ids a 201 lists, counted")
    # A conflict's current version is read at its key, percent-encoded.
    check(edits.item_path("pois", "a/b %2C,7") == "/collections/pois/items/a%2Fb%20%252C%2C7",
          "conflicts: a text key is percent-encoded in the item's URL")

    # 11. Processing: 100,000 points into a collection, then again (nothing written twice).
    source = QgsVectorLayer(geojson, "points", "ogr")
    check(source.isValid() and source.featureCount() == 100000, "load: the 100,000-point file opens")
    params = {"INPUT": source, "URL": direct_url, "AUTH": authcfg, "COLLECTION": "loaded", "MODE": 0}
    t = time.monotonic()
    first = processing.run("featurepipe:load", params)
    result["load"] = {"seconds": round(time.monotonic() - t, 3), "written": first["WRITTEN"]}
    t = time.monotonic()
    again = processing.run("featurepipe:load", params)
    result["load"]["again_seconds"] = round(time.monotonic() - t, 3)
    result["load"]["again_written"], result["load"]["again_replayed"] = again["WRITTEN"], again["REPLAYED"]
    check(first["WRITTEN"] == 100000, f"load: 100,000 written ({first})")
    check(again["WRITTEN"] == 0 and again["REPLAYED"] == 100000, f"load: run again, nothing written twice ({again})")
    # Part of the file (a limit) is not sent as it is: read through QGIS, in batches.
    part = QgsProcessingFeatureSourceDefinition(geojson, False, 5000)
    limited = processing.run("featurepipe:load", dict(params, INPUT=part, COLLECTION="loaded_part"))
    check(limited["WRITTEN"] == 5000, f"load: the first 5,000 features, in batches ({limited})")
    # Mode batch: the service refuses keys there, so its batches carry none.
    unkeyed = processing.run("featurepipe:load", dict(params, COLLECTION="loaded_batch", MODE=1))
    check(unkeyed["WRITTEN"] == 100000, f"load: mode batch, without keys ({unkeyed})")

    # 12. The algorithm beside `featurepipe push` on the same file, taking
    # turns, each run a new load (its own run name).
    loads, pushes = [], []
    for i in range(SIDE_BY_SIDE_RUNS):
        t = time.monotonic()
        timed = processing.run("featurepipe:load", dict(params, COLLECTION="timed_load", RUN=f"timed {i}"))
        loads.append(round(time.monotonic() - t, 3))
        t = time.monotonic()
        pushed = subprocess.run([push_bin, "push", geojson, "--collection", "timed_push", "--url", direct_url,
                                 "--api-key", api_key, "--run", f"timed {i}"], capture_output=True, text=True)
        pushes.append(round(time.monotonic() - t, 3))
        check(timed["WRITTEN"] == 100000 and pushed.returncode == 0,
              f"side by side {i}: both wrote ({timed}, {pushed.stderr[-300:]})")
    result["side_by_side"] = {"load": loads, "push": pushes,
                              "ratio": round(statistics.median(loads) / statistics.median(pushes), 2)}


try:
    run()
except Exception:
    traceback.print_exc()
    failures.append("exception: " + traceback.format_exc().splitlines()[-1])
result["failures"] = failures
result["messages"] = iface.messages[-20:]
print("RESULT " + json.dumps(result), flush=True)
qgis.utils.unloadPlugin("featurepipe")
app.exitQgis()
sys.exit(1 if failures else 0)
