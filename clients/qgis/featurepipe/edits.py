"""A layer's edit buffer as one featurepipe edit session, and the service's
answer as what QGIS should show.

No network and no GUI here: the plugin's tests call these functions
directly, with real QGIS layers and real answers.

A featurepipe layer is QGIS's OGC API - Features layer of a service URL that
carries `with-etags=true`: QGIS takes that query to every read, and the
service then gives each feature's key (under the key column's name) and its
ETag (`featurepipe:etag`) as properties, which QGIS makes fields. So the
plugin knows, for each feature QGIS loaded, which feature of the service it
is and which version was loaded, without a read of its own.
"""
import json
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from qgis.core import QgsDataSourceUri, QgsFeatureRequest
from qgis.PyQt.QtCore import QDate, QDateTime, QTime, Qt

ETAG_FIELD = "featurepipe:etag"
# With `with-etags`, the id of a feature keyed by several columns (`north,17`).
ID_FIELD = "featurepipe:id"
WITH_ETAGS = ("with-etags", "true")
CRS84 = "http://www.opengis.net/def/crs/OGC/1.3/CRS84"


def service_url(url):
    """The service's URL as a featurepipe layer's source has it (with `with-etags=true`)."""
    parts = urlsplit(url.rstrip("/") or url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != WITH_ETAGS[0]] + [WITH_ETAGS]
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return urlunsplit((parts.scheme, parts.netloc, path, urlencode(query), ""))


def base_url(url):
    """The service's URL without the plugin's query: where its own requests go."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != WITH_ETAGS[0]]
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), urlencode(query), ""))


def item_path(collection, key):
    """The path of the feature `key` of `collection`, the key percent-encoded
    (a text key may hold `/`, `%` or `?`; a key of several columns is
    `a,b`, with `~2C` for a comma in a value)."""
    return f"/collections/{collection}/items/{quote(str(key), safe='')}"


def layer_source(url, collection, authcfg=""):
    """The OAPIF data source of `collection` for a featurepipe layer."""
    uri = QgsDataSourceUri()
    uri.setParam("url", service_url(url))
    uri.setParam("typename", collection)
    if authcfg:
        uri.setAuthConfigId(authcfg)
    return uri.uri(False)


def featurepipe_source(layer):
    """(service URL, collection, authcfg) of a featurepipe layer, else None."""
    if layer is None or layer.type() != layer.VectorLayer or layer.providerType() != "OAPIF":
        return None
    uri = QgsDataSourceUri(layer.source())
    url, collection = uri.param("url"), uri.param("typename")
    if dict(parse_qsl(urlsplit(url).query)).get(WITH_ETAGS[0]) != WITH_ETAGS[1] or not collection:
        return None
    return base_url(url), collection, uri.authConfigId()


class Schema:
    """What the plugin needs of a collection's schema (`/collections/{id}/schema`)."""

    def __init__(self, document):
        props = (document or {}).get("properties", {})
        # The key column, or (a key of several columns) the id the service adds.
        self.key = next((n for n, p in props.items() if p.get("x-ogc-role") == "id"), ID_FIELD)
        self.geometry = next((n for n, p in props.items() if p.get("x-ogc-role") == "primary-geometry"), None)
        # Never sent: what the collection marks read-only (the key it assigns,
        # generated columns, the last-modified column), and the ETag.
        self.read_only = {n for n, p in props.items() if p.get("readOnly")} | {ETAG_FIELD, ID_FIELD}
        self.known = set(props)


def content_crs(crs):
    """(Content-Crs URI, swap x and y) for coordinates in QGIS's `crs`.

    QGIS keeps coordinates east first. EPSG:4326 is sent as CRS84 (the same
    datum, longitude first); another CRS whose EPSG axis order is north first
    has its axes swapped, as featurepipe reads EPSG axis order."""
    authid = crs.authid()
    if authid in ("EPSG:4326", "OGC:CRS84", ""):
        return CRS84, False
    if authid.startswith("EPSG:"):
        return f"http://www.opengis.net/def/crs/EPSG/0/{authid[5:]}", crs.hasAxisInverted()
    return crs.toOgcUri() or CRS84, crs.hasAxisInverted()


def swapped(coordinates):
    """GeoJSON coordinates with x and y swapped, at any depth."""
    if coordinates and isinstance(coordinates[0], (int, float)):
        return [coordinates[1], coordinates[0], *coordinates[2:]]
    return [swapped(c) for c in coordinates]


def geometry_json(geometry, swap=False):
    """A QgsGeometry as a GeoJSON geometry (None when empty)."""
    if geometry is None or geometry.isNull() or geometry.isEmpty():
        return None
    doc = json.loads(geometry.asJson(17))
    if swap:
        if doc["type"] == "GeometryCollection":
            for g in doc["geometries"]:
                g["coordinates"] = swapped(g["coordinates"])
        else:
            doc["coordinates"] = swapped(doc["coordinates"])
    return doc


def value_json(value):
    """An attribute value as JSON (None for NULL)."""
    if value is None:
        return None
    if hasattr(value, "isNull") and value.isNull():
        return None
    if isinstance(value, QDateTime):
        return value.toString(Qt.ISODateWithMs)
    if isinstance(value, QDate):
        return value.toString(Qt.ISODate)
    if isinstance(value, QTime):
        return value.toString(Qt.ISODateWithMs)
    if isinstance(value, (list, tuple)):
        return [value_json(v) for v in value]
    if isinstance(value, dict):
        return {k: value_json(v) for k, v in value.items()}
    if type(value).__name__ == "QVariant":
        return None
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    return value


class Snapshot:
    """A layer's edit buffer as it was when the save began, and the version
    of each changed or deleted feature that QGIS had loaded."""

    def __init__(self, layer):
        buffer = layer.editBuffer()
        fields = layer.fields()
        self.fields = fields
        # QGIS numbers added features -1, -2, …: in the order they were added.
        self.added = sorted(buffer.addedFeatures().items(), key=lambda kv: -kv[0])
        added = {fid for fid, _ in self.added}
        deleted = set(buffer.deletedFeatureIds()) - added
        changed_values = {fid: v for fid, v in buffer.changedAttributeValues().items()
                          if fid not in added and fid not in deleted}
        changed_geometries = {fid: g for fid, g in buffer.changedGeometries().items()
                              if fid not in added and fid not in deleted}
        self.changed = sorted(set(changed_values) | set(changed_geometries))
        self.changed_values = {
            fid: {fields.at(i).name(): v for i, v in changed_values.get(fid, {}).items()}
            for fid in self.changed
        }
        self.changed_geometries = changed_geometries
        self.deleted = sorted(deleted)
        wanted = self.changed + self.deleted
        # The loaded versions, from the provider (its cache: no request).
        self.loaded = {}
        if wanted:
            request = QgsFeatureRequest().setFilterFids(wanted)
            self.loaded = {f.id(): f for f in layer.dataProvider().getFeatures(request)}

    def is_empty(self):
        return not (self.added or self.changed or self.deleted)


class NotSaveable(Exception):
    """The edit buffer holds something the service cannot be told (a field
    added in QGIS, a feature without a loaded version)."""


def loaded_version(snapshot, schema, fid):
    """(key, ETag) of feature `fid` as QGIS loaded it."""
    feature = snapshot.loaded.get(fid)
    if feature is None:
        raise NotSaveable(f"feature {fid}: QGIS holds no loaded version of it to save against")
    names = feature.fields().names()
    key = value_json(feature[schema.key]) if schema.key in names else None
    etag = value_json(feature[ETAG_FIELD]) if ETAG_FIELD in names else None
    if key is None or not etag:
        raise NotSaveable(f"feature {fid}: its key or ETag was not loaded (is the layer's URL the plugin's, with with-etags=true?)")
    return key, etag


def properties_of(feature, schema, skip_null):
    """A new feature's properties: its fields but the read-only ones (and
    NULLs, so that the column's default applies)."""
    out = {}
    for field, value in zip(feature.fields(), feature.attributes()):
        name = field.name()
        if name in schema.read_only or (schema.known and name not in schema.known):
            continue
        value = value_json(value)
        if value is None and skip_null:
            continue
        out[name] = value
    return out


class Plan:
    """What each operation of a session is, for reading its answer."""

    def __init__(self):
        # One entry per operation: ("delete" | "update", fid) or ("insert", [fids]).
        self.operations = []
        self.etags = {}  # fid -> ETag it was saved against
        self.keys = {}  # fid -> the service's key

    def fid_at(self, operation, feature=None):
        kind, what = self.operations[operation]
        if kind == "insert":
            return what[feature] if feature is not None and feature < len(what) else None
        return what


def session(snapshot, collection, schema, crs):
    """The edit session of `snapshot` for `collection`: (document, Content-Crs, plan).

    Deletes, then changes (a merge patch of the changed fields and the
    geometry), then one insert of every added feature, each change and
    delete with the ETag of the version loaded as its `if_match`. NULL
    fields of an added feature are left out so that their defaults apply;
    read-only fields are never sent."""
    crs_uri, swap = content_crs(crs)
    plan = Plan()
    operations = []
    for fid in snapshot.deleted:
        key, etag = loaded_version(snapshot, schema, fid)
        operations.append({"op": "delete", "collection": collection, "id": key, "if_match": etag})
        plan.operations.append(("delete", fid))
        plan.etags[fid], plan.keys[fid] = etag, key
    for fid in snapshot.changed:
        key, etag = loaded_version(snapshot, schema, fid)
        patch = {}
        props = {n: value_json(v) for n, v in snapshot.changed_values[fid].items()
                 if n not in schema.read_only and (not schema.known or n in schema.known)}
        if props:
            patch["properties"] = props
        if fid in snapshot.changed_geometries:
            patch["geometry"] = geometry_json(snapshot.changed_geometries[fid], swap)
        if not patch:
            continue
        operations.append({"op": "update", "collection": collection, "id": key, "patch": patch, "if_match": etag})
        plan.operations.append(("update", fid))
        plan.etags[fid], plan.keys[fid] = etag, key
    if snapshot.added:
        features = [{
            "type": "Feature",
            "properties": properties_of(f, schema, skip_null=True),
            "geometry": geometry_json(f.geometry(), swap),
        } for _, f in snapshot.added]
        operations.append({"op": "insert", "collection": collection,
                           "features": {"type": "FeatureCollection", "features": features}})
        plan.operations.append(("insert", [fid for fid, _ in snapshot.added]))
    return {"operations": operations}, crs_uri, plan


class Problem:
    """One problem the service found, at a feature of the layer and a field."""

    def __init__(self, fid, field, code, message):
        self.fid, self.field, self.code, self.message = fid, field, code, message

    def __repr__(self):
        return f"Problem(fid={self.fid}, field={self.field!r}, {self.code}: {self.message})"

    def as_dict(self):
        return {"fid": self.fid, "field": self.field, "code": self.code, "message": self.message}


def field_of(pointer):
    """The field a JSON pointer names (`…/properties/height` -> height), or
    "geometry", or None."""
    parts = pointer.split("/")
    if "properties" in parts[:-1]:
        name = parts[parts.index("properties") + 1]
        return name.replace("~1", "/").replace("~0", "~")
    if parts and parts[-1] == "geometry" or "geometry" in parts:
        return "geometry"
    return None


class Outcome:
    """What a save came to.

    kind: "saved" (written: `new_ids` maps each added feature's QGIS fid to
    its key, in feature order), "conflict" (412: nothing written; `conflicts`
    lists the features someone else changed), "invalid" (nothing written;
    `problems` at their features and fields), "unknown" (the answer was lost
    and retries did not settle it), or "refused" (any other refusal; nothing
    written: `message` says why)."""

    def __init__(self, kind, message="", new_ids=None, problems=None, conflicts=None, etags=None):
        self.kind = kind
        self.message = message
        self.new_ids = new_ids or {}
        self.problems = problems or []
        self.conflicts = conflicts or []
        self.etags = etags or {}
        # Seconds taken by each part of the save.
        self.timing = {}

    def __repr__(self):
        return f"Outcome({self.kind}, {self.message!r}, problems={self.problems}, conflicts={len(self.conflicts)})"


class Conflict:
    """A feature someone else changed (or deleted) since QGIS loaded it."""

    def __init__(self, fid, key, current=None, etag=None):
        self.fid, self.key = fid, key
        self.current = current  # the feature as it is now (GeoJSON), None if deleted
        self.etag = etag


def read_answer(status, document, plan):
    """The Outcome of the answer (`status`, its JSON `document`) to a session planned as `plan`."""
    document = document or {}
    if status == 200:
        new_ids, etags = {}, {}
        for k, result in enumerate(document.get("results", [])):
            if k >= len(plan.operations):
                break
            kind, what = plan.operations[k]
            if kind == "insert":
                new_ids.update(zip(what, result.get("ids") or []))
            elif kind == "update" and result.get("etag"):
                etags[what] = result["etag"]
        written = document.get("written", 0)
        if document.get("not_written"):
            return Outcome("refused", f"{document['not_written']} operation(s) not written", new_ids=new_ids)
        return Outcome("saved", f"{written} operation(s) written in one request", new_ids=new_ids, etags=etags)
    errors = document.get("errors", [])
    detail = document.get("detail") or document.get("title") or f"HTTP {status}"
    if status == 412:
        conflicts = []
        for e in errors:
            op = e.get("operation")
            if op is None or op >= len(plan.operations):
                continue
            fid = plan.fid_at(op)
            conflicts.append(Conflict(fid, plan.keys.get(fid), document.get("feature"), document.get("etag")))
        return Outcome("conflict", detail, conflicts=conflicts)
    if status in (400, 404, 409, 413, 422) and errors:
        problems = []
        for e in errors:
            op = e.get("operation")
            fid = plan.fid_at(op, e.get("feature")) if op is not None and op < len(plan.operations) else None
            problems.append(Problem(fid, field_of(e.get("pointer", "")), e.get("code", ""), e.get("message", "")))
        return Outcome("invalid", detail, problems=problems)
    if status == 0 or status in (502, 503, 504):
        return Outcome("unknown", detail)
    return Outcome("refused", detail)
