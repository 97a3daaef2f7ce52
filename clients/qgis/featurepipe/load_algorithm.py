"""Processing: load any layer's features into a featurepipe collection
through its bulk POST, in large batches, several at once, resumably.

Each batch is a FeatureCollection (in CRS84, as featurepipe reads it by
default) POSTed under an Idempotency-Key that is
the SHA-256 of the collection, the mode, the run's name and the batch's
bytes: running the algorithm again on the same input (after a cancel, a
lost connection or a fix) writes only the batches not yet written; the
service replays the others' answers, as with `featurepipe push`.

A GeoJSON file in CRS84 whose every field the collection takes (and none
it makes read-only) is sent as its own bytes, cut between its features
(`split`), as `featurepipe push` sends a file: reading 100,000 features
through QGIS and writing them again took three times what the service
took to store them.
"""
import hashlib
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from qgis.core import (
    QgsFeatureRequest,
    QgsJsonExporter,
    QgsProcessing,
    QgsProcessingAlgorithm,
    QgsProcessingException,
    QgsProcessingParameterAuthConfig,
    QgsProcessingParameterEnum,
    QgsProcessingParameterFeatureSource,
    QgsProcessingParameterNumber,
    QgsProcessingParameterString,
    QgsProcessingOutputNumber,
    QgsProcessingFeatureSourceDefinition,
    QgsProviderRegistry,
)

from . import connections, split
from .client import Client

MODES = ["atomic", "batch", "skip"]
# About what one request carries (featurepipe push's default).
BATCH_BYTES = 2 << 20
FIRST_BATCH = 2000
# The largest file read into memory to be sent as its own bytes.
FILE_BYTES = 256 << 20
GEOJSON = {"Content-Type": "application/geo+json"}


class Encoder:
    """Features as a FeatureCollection's bytes, in CRS84 (featurepipe's
    default), with the fields `sent` (by index), by QGIS's own GeoJSON
    writer. One per thread: QgsJsonExporter releases Python's lock while
    it writes, so batches are encoded on the sending threads, in parallel,
    while the algorithm's thread reads the next."""

    def __init__(self, sent, crs):
        self.sent, self.crs = sent, crs
        self.local = threading.local()

    def __call__(self, features):
        exporter = getattr(self.local, "exporter", None)
        if exporter is None:
            exporter = QgsJsonExporter()
            exporter.setPrecision(15)
            exporter.setAttributes(self.sent)
            exporter.setSourceCrs(self.crs)
            exporter.setTransformGeometries(self.crs.isValid() and self.crs.authid() not in ("EPSG:4326", "OGC:CRS84"))
            self.local.exporter = exporter
        return exporter.exportFeatures(features).encode("utf-8")


def file_as_it_is(parameter, layer, schema):
    """The path of the GeoJSON file behind `layer` when the file's own bytes
    can be sent: all of it (no selection, filter or limit in the Processing
    `parameter`, no subset string), in CRS84, at most FILE_BYTES, every
    field one the collection takes; else None."""
    if isinstance(parameter, QgsProcessingFeatureSourceDefinition) and (
            parameter.selectedFeaturesOnly or parameter.featureLimit != -1 or parameter.filterExpression):
        return None
    if layer is None or layer.providerType() != "ogr" or layer.subsetString():
        return None
    if layer.dataProvider().storageType() != "GeoJSON" or layer.crs().authid() not in ("EPSG:4326", "OGC:CRS84"):
        return None
    if any(f.name() not in schema.known or f.name() in schema.read_only for f in layer.fields()):
        return None
    path = QgsProviderRegistry.instance().decodeUri("ogr", layer.source()).get("path", "")
    if not os.path.isfile(path) or os.path.getsize(path) > FILE_BYTES:
        return None
    return path


def batch_key(collection, mode, run, body):
    """The Idempotency-Key of a batch: the same input makes the same keys."""
    digest = hashlib.sha256()
    for part in (collection, mode, run):
        digest.update(part.encode("utf-8") + b"\0")
    digest.update(body)
    return "qgis-load-" + digest.hexdigest()


def features_answered(answer, document):
    """How many features the service says a batch held: a 201's ids, a 200
    report's operations, a refused write's batches (0 when it does not say)."""
    if answer.status == 201:
        return ids_listed(answer.body)
    if answer.status == 200:
        return document.get("written", 0) + document.get("not_written", 0)
    return sum(b.get("count", 0) for b in document.get("batches", []) if isinstance(b, dict))


def ids_listed(body):
    """How many ids a 201's bulk report lists: when they are numbers (a
    batch's are 100 KB of JSON), its commas, else parsed."""
    at = body.find(b'"ids":[')
    if at != -1:
        at += len(b'"ids":[')
        first = body[at:at + 1]
        if first == b"]":
            return 0
        if first and first in b"-0123456789":
            return body.count(b",", at, body.find(b"]", at)) + 1
    try:
        return len(json.loads(body)["ids"])
    except (ValueError, KeyError, TypeError):
        return 0


class LoadIntoCollection(QgsProcessingAlgorithm):
    """Load a layer into a featurepipe collection."""

    INPUT, URL, AUTH, COLLECTION, MODE, RUN, JOBS = "INPUT", "URL", "AUTH", "COLLECTION", "MODE", "RUN", "JOBS"

    def name(self):
        return "load"

    def displayName(self):  # noqa: N802 (QGIS's names)
        return "Load a layer into a collection"

    def shortHelpString(self):  # noqa: N802
        return ("Writes every feature of the input into a featurepipe collection through its bulk POST, "
                "in batches of about 2 MiB, several at once. Each batch has an Idempotency-Key made from its "
                "content: run the algorithm again on the same input (and run name) to finish a load that was "
                "cancelled or cut off: batches already written are not written again. Read-only fields and "
                "fields the collection does not have are not sent.")

    def createInstance(self):  # noqa: N802
        return LoadIntoCollection()

    def initAlgorithm(self, config=None):  # noqa: N802
        self.addParameter(QgsProcessingParameterFeatureSource(self.INPUT, "Input layer",
                                                              [QgsProcessing.TypeVector]))
        self.addParameter(QgsProcessingParameterString(self.URL, "featurepipe service URL",
                                                       "http://127.0.0.1:8080"))
        self.addParameter(QgsProcessingParameterAuthConfig(self.AUTH, "Credentials", optional=True))
        self.addParameter(QgsProcessingParameterString(self.COLLECTION, "Collection"))
        self.addParameter(QgsProcessingParameterEnum(self.MODE, "Mode of each batch", MODES, defaultValue=0))
        self.addParameter(QgsProcessingParameterString(self.RUN, "Run name (a new load of data loaded before)",
                                                       "", optional=True))
        self.addParameter(QgsProcessingParameterNumber(self.JOBS, "Batches sent at once", minValue=1,
                                                       maxValue=16, defaultValue=4))
        self.addOutput(QgsProcessingOutputNumber("WRITTEN", "Features written"))
        self.addOutput(QgsProcessingOutputNumber("REPLAYED", "Features an earlier run had written"))

    def processAlgorithm(self, parameters, context, feedback):  # noqa: N802
        source = self.parameterAsSource(parameters, self.INPUT, context)
        url = self.parameterAsString(parameters, self.URL, context)
        authcfg = self.parameterAsString(parameters, self.AUTH, context)
        collection = self.parameterAsString(parameters, self.COLLECTION, context)
        mode = MODES[self.parameterAsEnum(parameters, self.MODE, context)]
        run = self.parameterAsString(parameters, self.RUN, context)
        jobs = self.parameterAsInt(parameters, self.JOBS, context)
        client = Client(url, authcfg)
        try:
            schema = connections.schema(client, collection)
        except RuntimeError as e:
            raise QgsProcessingException(str(e)) from e
        fields = source.fields()
        sent = [i for i, f in enumerate(fields) if f.name() in schema.known and f.name() not in schema.read_only]
        encode = Encoder(sent, source.sourceCrs())
        total = source.featureCount() or 0
        path = f"/collections/{collection}/items?mode={mode}"
        totals = {"written": 0, "replayed": 0, "failed": 0, "refused": 0, "sent": 0}
        # The service refuses keys in mode batch (its batches commit one by one).
        keyed = mode != "batch"
        problems = []

        def post(body, count):
            if keyed:
                answer, _ = client.post_keyed(path, body, dict(GEOJSON), key=batch_key(collection, mode, run, body))
            else:
                answer = client.post(path, body, dict(GEOJSON))
            return answer, count, len(body)

        def send(features):
            return post(encode(features), len(features))

        def settle(answered):
            """Count a batch's answer; `count` is None for a file's batch, whose answer says it."""
            answer, count, size = answered
            replayed = answer.headers.get("idempotent-replayed", "") == "true"
            # A 201 says all were written: its ids are counted, not parsed
            # (a batch's are 100 KB of JSON).
            document = {} if answer.status == 201 else answer.json() or {}
            if count is None:
                count = features_answered(answer, document)
            else:
                # Batches of about BATCH_BYTES, whatever the features' size.
                sizing[0] = max(1, int(count * BATCH_BYTES / max(size, 1)))
            if answer.status == 201:
                totals["replayed" if replayed else "written"] += count
            elif answer.status == 200:
                written = document.get("written", 0)
                totals["replayed" if replayed else "written"] += written
                totals["failed"] += count - written
                problems.extend(e.get("error", {}).get("message", "") for e in document.get("results", [])
                                if e.get("error"))
            else:
                totals["failed"] += count
                totals["refused"] += 1
                detail = answer.detail
                if answer.lost and not keyed:
                    detail += " (mode batch carries no Idempotency-Key: whether it was written is not known)"
                problems.append(detail)
                for e in document.get("errors", [])[:5]:
                    problems.append(f"  {e.get('pointer', '')}: {e.get('message', '')}")
                if answer.status in (401, 403, 404, 413, 415):
                    raise QgsProcessingException(f"the service refused the batch: {detail}")
            totals["sent"] += count
            if total:
                feedback.setProgress(100.0 * totals["sent"] / total)

        sizing = [FIRST_BATCH]

        def in_batches():
            batch, in_flight = [], []
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                request = QgsFeatureRequest().setSubsetOfAttributes(sent)
                for feature in source.getFeatures(request):
                    if feedback.isCanceled():
                        break
                    batch.append(feature)
                    if len(batch) >= sizing[0]:
                        in_flight.append(pool.submit(send, batch))
                        batch = []
                        while len(in_flight) > jobs:
                            settle(in_flight.pop(0).result())
                if batch and not feedback.isCanceled():
                    in_flight.append(pool.submit(send, batch))
                for future in in_flight:
                    settle(future.result())

        def from_file(body, start):
            """The file's own features, a run of about BATCH_BYTES a batch,
            JOBS at once on QGIS's network thread."""
            def batches():
                for first, end in split.feature_runs(body, start, BATCH_BYTES):
                    batch = split.batch(body, first, end)
                    yield batch, batch_key(collection, mode, run, batch) if keyed else None, (None, len(batch))

            def answered(answer, tag):
                settle((answer, *tag))
                return not feedback.isCanceled()

            client.post_all(path, batches(), dict(GEOJSON), jobs, answered)

        layer = self.parameterAsVectorLayer(parameters, self.INPUT, context)
        geojson = file_as_it_is(parameters[self.INPUT], layer, schema)
        body = start = None
        if geojson:
            with open(geojson, "rb") as f:
                body = f.read()
            start = split.splittable(body)
        if start is not None:
            feedback.pushInfo(f"sending {geojson} as its own bytes, in batches of about {BATCH_BYTES >> 20} MiB")
            from_file(body, start)
        elif not feedback.isCanceled():
            in_batches()
        for line in problems[:20]:
            feedback.reportError(line)
        feedback.pushInfo(f"{totals['written']} feature(s) written, {totals['replayed']} written by an earlier "
                          f"run, {totals['failed']} not written")
        if feedback.isCanceled():
            feedback.pushInfo("cancelled: run it again on the same input to load the rest")
        elif totals["failed"] or totals["refused"]:
            again = ("batches already written are not written again" if keyed
                     else "in mode batch, without keys, every batch is written again")
            raise QgsProcessingException(f"{totals['failed']} feature(s) not written ({totals['refused']} batch(es) "
                                         f"refused): fix them and run the algorithm again ({again})")
        return {"WRITTEN": totals["written"], "REPLAYED": totals["replayed"]}


