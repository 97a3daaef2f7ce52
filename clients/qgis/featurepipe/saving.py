"""Save Layer Edits on a featurepipe layer: the whole edit buffer as one
edit session (`POST /transactions`), in place of QGIS's provider, which
would send one request per feature.

QGIS emits `beforeCommitChanges` before its provider writes anything. The
plugin then sends the session, and empties the edit buffer (`drop_edits`),
so that QGIS's own commit that follows writes nothing.
Saved: the layer reads the service again (its pages, as when it was opened;
no read per feature) and shows the new features with their keys. Not saved:
the edits are put back into the buffer once QGIS's commit has returned, so
that the user can fix them and save again, and the outcome says which
feature and field each problem is at, or which features someone else
changed.
"""
import json
import time

from qgis.core import Qgis, QgsFeature, QgsMessageLog
from qgis.PyQt.QtCore import QTimer

from . import connections
from .client import Client
from .edits import (
    Conflict,
    NotSaveable,
    Outcome,
    Snapshot,
    featurepipe_source,
    item_path,
    read_answer,
    session,
)

TAG = "featurepipe"


def drop_edits(layer):
    """Empty `layer`'s edit buffer, so that QGIS's commit that follows
    writes nothing, without undoing its edits one by one as `rollBack`
    does: undoing an attribute change made without its old value reads the
    feature again (0.1 s for 1,000 changes). The undo stack is cleared, so
    that there is nothing to undo, the buffer dropped and a new one started,
    which QGIS's commit then finds empty."""
    layer.undoStack().clear()
    layer.rollBack(True)
    layer.startEditing()


class Stash:
    """The edits of a snapshot, to be put back into a layer's buffer."""

    def __init__(self, snapshot, keys):
        self.added = [(fid, QgsFeature(f)) for fid, f in snapshot.added]
        self.changed_values = dict(snapshot.changed_values)
        self.changed_geometries = dict(snapshot.changed_geometries)
        self.deleted = list(snapshot.deleted)
        # The service's key of each changed or deleted feature.
        self.keys = dict(keys)
        self.moved = {}

    def renumber(self, fids):
        """The layer was read again: `fids` maps each old fid to its new one
        (None: the feature is gone)."""
        self.moved = fids
        self.changed_values = {fids[f]: v for f, v in self.changed_values.items() if fids.get(f) is not None}
        self.changed_geometries = {fids[f]: g for f, g in self.changed_geometries.items() if fids.get(f) is not None}
        self.deleted = [fids[f] for f in self.deleted if fids.get(f) is not None]

    def renumbered(self, fid):
        return self.moved.get(fid, fid)

    def restore(self, layer, leave_out=()):
        """Put the edits back (but those of the features `leave_out`); the
        new fid of each added feature, by its old one."""
        if not layer.isEditable():
            layer.startEditing()
        fields = layer.fields()
        renumbered = {}
        for fid, feature in self.added:
            copy = QgsFeature(feature)
            layer.addFeature(copy)
            renumbered[fid] = copy.id()
        for fid, values in self.changed_values.items():
            if fid in leave_out:
                continue
            for name, value in values.items():
                index = fields.indexOf(name)
                if index >= 0:
                    layer.changeAttributeValue(fid, index, value)
        for fid, geometry in self.changed_geometries.items():
            if fid not in leave_out:
                layer.changeGeometry(fid, geometry)
        kept = [fid for fid in self.deleted if fid not in leave_out]
        if kept:
            layer.deleteFeatures(kept)
        return renumbered


class Saver:
    """Saves the edits of the featurepipe layers it watches, one request each."""

    def __init__(self, on_outcome=None):
        self.on_outcome = on_outcome
        self.schemas = {}
        self.outcomes = {}
        self.pending = {}
        self.watched = {}
        self.unknown = {}
        self.requests = 0

    def watch(self, layer):
        """Save `layer`'s edits in one request from now on (if it is a featurepipe layer)."""
        source = featurepipe_source(layer)
        if source is None or layer.id() in self.watched:
            return source is not None
        handler = lambda stop, layer=layer: self.before_commit(layer)  # noqa: E731
        layer.beforeCommitChanges.connect(handler)
        self.watched[layer.id()] = (layer, handler)
        # The schema now, so that a save is one request.
        self.schema(layer)
        return True

    def unwatch(self, layer_id):
        layer, handler = self.watched.pop(layer_id, (None, None))
        if layer is not None:
            try:
                layer.beforeCommitChanges.disconnect(handler)
            except (TypeError, RuntimeError):
                pass

    def client(self, layer):
        url, _, authcfg = featurepipe_source(layer)
        return Client(url, authcfg)

    def schema(self, layer):
        """The collection's Schema (read once per layer)."""
        if layer.id() not in self.schemas:
            _, collection, _ = featurepipe_source(layer)
            try:
                self.schemas[layer.id()] = connections.schema(self.client(layer), collection)
            except RuntimeError as e:
                raise NotSaveable(str(e)) from e
        return self.schemas[layer.id()]

    def before_commit(self, layer):
        """QGIS is about to commit `layer`: send its edits, and leave QGIS nothing to write."""
        started = time.monotonic()
        snapshot = Snapshot(layer)
        if snapshot.is_empty():
            return
        taken = time.monotonic()
        outcome, keys = self.save(layer, snapshot)
        outcome.timing["snapshot"] = round(taken - started, 3)
        stash = Stash(snapshot, keys)
        emptying = time.monotonic()
        drop_edits(layer)
        outcome.timing["emptying"] = round(time.monotonic() - emptying, 3)
        self.outcomes[layer.id()] = outcome
        self.pending[layer.id()] = (outcome, stash)
        # After QGIS's commit has returned (and left editing, if it does).
        QTimer.singleShot(0, lambda layer=layer: self.finish(layer))

    def save(self, layer, snapshot):
        """Send `snapshot` as one edit session: its Outcome, and the key of
        each changed or deleted feature."""
        started = time.monotonic()
        try:
            schema = self.schema(layer)
            _, collection, _ = featurepipe_source(layer)
            document, crs_uri, plan = session(snapshot, collection, schema, layer.crs())
        except NotSaveable as e:
            return Outcome("refused", str(e)), {}
        encoded = time.monotonic()
        client = self.client(layer)
        headers = {"Content-Crs": f"<{crs_uri}>"}
        retried = []
        # The same edits again after an unknown outcome: the same key, so
        # that the service writes them at most once.
        text = json.dumps(document, sort_keys=True)
        unknown = self.unknown.pop(layer.id(), None)
        key = unknown[1] if unknown and unknown[0] == text else None
        answer, key = client.post_keyed("/transactions", document, headers, key=key,
                                        on_retry=lambda n, a: retried.append(a.status))
        self.requests += 1 + len(retried)
        if retried:
            QgsMessageLog.logMessage(
                f"the answer to the save was lost ({retried}); sent again with the same Idempotency-Key {key}",
                TAG, Qgis.Warning)
        sent = time.monotonic()
        outcome = read_answer(answer.status, answer.json(), plan)
        outcome.timing = {"session": round(encoded - started, 3), "request": round(sent - encoded, 3),
                          "database_ms": sum(b.get("db_ms", 0) for b in (answer.json() or {}).get("batches", []))}
        outcome.key = key
        outcome.retries = len(retried)
        if outcome.kind == "conflict":
            outcome.conflicts = self.conflicts(client, collection, plan) or outcome.conflicts
        if outcome.kind == "unknown":
            self.unknown[layer.id()] = (text, key)
            if answer.error:
                outcome.message = f"{outcome.message} ({answer.error})"
        return outcome, plan.keys

    def conflicts(self, client, collection, plan):
        """Every feature of the session someone else changed or deleted since
        it was loaded: one conditional read each (304 when unchanged), done
        only after a 412."""
        found = []
        for fid, etag in plan.etags.items():
            key = plan.keys[fid]
            answer = client.get(item_path(collection, key), {"If-None-Match": f'"{etag}"'})
            if answer.status == 304:
                continue
            if answer.status == 404:
                found.append(Conflict(fid, key, None, None))
            elif answer.status == 200:
                found.append(Conflict(fid, key, answer.json(), answer.headers.get("etag", "").strip('"')))
        return found

    def finish(self, layer, leave_out=()):
        """After QGIS's commit: show the saved state, or put the edits back."""
        pending = self.pending.pop(layer.id(), None)
        if pending is None:
            return None
        outcome, stash = pending
        if outcome.kind == "saved":
            layer.dataProvider().reloadData()
            layer.triggerRepaint()
        else:
            renumbered = stash.restore(layer, leave_out)
            for problem in outcome.problems:
                problem.fid = renumbered.get(problem.fid, problem.fid)
            outcome.stash = stash
        if self.on_outcome:
            self.on_outcome(layer, outcome)
        return outcome

    def finish_all(self):
        """Finish every save whose commit has returned (tests call this
        instead of waiting for the event loop)."""
        for layer_id in list(self.pending):
            layer = self.watched.get(layer_id, (None, None))[0]
            if layer is not None:
                self.finish(layer)

    def reload_conflicting(self, layer, outcome):
        """Drop the user's edits of the features someone else changed, read
        the layer again (QGIS then shows their versions), and put the other
        edits back. A read renumbers QGIS's features, so the edits find their
        features again by key."""
        conflicting = {c.fid for c in outcome.conflicts}
        stash = getattr(outcome, "stash", None)
        if layer.isEditable():
            layer.rollBack(False)
        layer.dataProvider().reloadData()
        layer.reload()
        if stash is None:
            return
        key = self.schema(layer).key
        now = {f[key]: f.id() for f in layer.getFeatures()}
        stash.renumber({fid: now.get(k) for fid, k in stash.keys.items()})
        stash.restore(layer, leave_out={stash.renumbered(fid) for fid in conflicting})
        layer.triggerRepaint()
