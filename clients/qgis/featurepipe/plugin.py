"""The plugin in QGIS's window: a connect dialog, the layers it watches, and
what it shows after a save."""
import json

from qgis.core import Qgis, QgsApplication, QgsProject
from qgis.PyQt.QtWidgets import (
    QAction,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)
from qgis.PyQt.QtCore import Qt

from . import connections
from .saving import Saver

MENU = "&featurepipe"


class ConnectDialog(QDialog):
    """A service's URL and credentials, then the collections to add."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Connect to a featurepipe service")
        form = QFormLayout(self)
        self.name = QLineEdit("featurepipe")
        self.url = QLineEdit("http://127.0.0.1:8080")
        self.api_key = QLineEdit()
        self.api_key.setEchoMode(QLineEdit.Password)
        self.token = QLineEdit()
        self.token.setEchoMode(QLineEdit.Password)
        self.collections = QListWidget()
        self.collections.setSelectionMode(QListWidget.MultiSelection)
        form.addRow("Name", self.name)
        form.addRow("URL", self.url)
        form.addRow("API key", self.api_key)
        form.addRow("or bearer token", self.token)
        form.addRow(QLabel("Credentials are kept in QGIS's authentication database."))
        form.addRow("Collections", self.collections)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        self.list_button = buttons.addButton("List collections", QDialogButtonBox.ActionRole)
        self.list_button.clicked.connect(self.list_collections)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self.authcfg = ""

    def list_collections(self):
        try:
            self.authcfg = self.authcfg or connections.store_credentials(
                self.name.text(), self.api_key.text().strip(), self.token.text().strip())
            found = connections.collections(self.url.text().strip(), self.authcfg)
        except RuntimeError as e:
            QMessageBox.warning(self, "featurepipe", str(e))
            return
        self.collections.clear()
        for cid, title in found:
            item = QListWidgetItem(f"{title} ({cid})")
            item.setData(Qt.UserRole, cid)
            self.collections.addItem(item)


class ConflictDialog(QDialog):
    """The features someone else changed: both versions, and a way to take theirs."""

    def __init__(self, layer, outcome, saver, parent=None):
        super().__init__(parent)
        self.setWindowTitle(f"featurepipe: {len(outcome.conflicts)} feature(s) changed by someone else")
        self.layer, self.outcome, self.saver = layer, outcome, saver
        box = QVBoxLayout(self)
        box.addWidget(QLabel(
            "Nothing was saved. These features were changed (or deleted) on the service\n"
            "since QGIS loaded them. Your edits are kept; reload takes their versions\n"
            "of these features and keeps your other edits."))
        table = QTableWidget(0, 4)
        table.setHorizontalHeaderLabels(["feature", "field", "yours", "theirs"])
        for row in conflict_rows(layer, outcome, saver):
            at = table.rowCount()
            table.insertRow(at)
            for col, text in enumerate(row):
                table.setItem(at, col, QTableWidgetItem(str(text)))
        table.resizeColumnsToContents()
        box.addWidget(table)
        buttons = QDialogButtonBox()
        reload_button = buttons.addButton("Reload their versions", QDialogButtonBox.AcceptRole)
        buttons.addButton("Keep my edits", QDialogButtonBox.RejectRole)
        reload_button.clicked.connect(self.reload)
        buttons.rejected.connect(self.reject)
        box.addWidget(buttons)
        self.table = table

    def reload(self):
        self.saver.reload_conflicting(self.layer, self.outcome)
        self.accept()


def conflict_rows(layer, outcome, saver):
    """(feature key, field, yours, theirs) for each differing field of each conflict."""
    rows = []
    stash = getattr(outcome, "stash", None)
    for c in outcome.conflicts:
        mine = dict(stash.changed_values.get(c.fid, {})) if stash else {}
        if stash and c.fid in stash.deleted:
            mine = {"(feature)": "deleted"}
        theirs = (c.current or {}).get("properties", {}) if c.current else None
        if theirs is None:
            rows.append((c.key, "(feature)", "changed" if mine else "", "deleted"))
            continue
        names = list(mine) or [n for n in theirs if n != "featurepipe:etag"]
        for name in names:
            rows.append((c.key, name, _text(mine.get(name, "(unchanged)")), _text(theirs.get(name))))
    return rows


def _text(value):
    if hasattr(value, "toString"):
        return value.toString()
    return json.dumps(value) if isinstance(value, (dict, list)) else ("NULL" if value is None else str(value))


class FeaturepipePlugin:
    """QGIS's entry point."""

    def __init__(self, iface):
        self.iface = iface
        self.saver = Saver(on_outcome=self.show_outcome)
        self.actions = []
        self.provider = None

    def initProcessing(self):  # noqa: N802 (QGIS's name)
        from .processing_provider import Provider

        self.provider = Provider()
        QgsApplication.processingRegistry().addProvider(self.provider)

    def initGui(self):  # noqa: N802
        self.initProcessing()
        action = QAction("Connect to a featurepipe service…", self.iface.mainWindow())
        action.triggered.connect(self.connect)
        self.iface.addPluginToWebMenu(MENU, action)
        self.actions.append(action)
        QgsProject.instance().layersAdded.connect(self.layers_added)
        QgsProject.instance().layersWillBeRemoved.connect(self.layers_removed)
        self.layers_added(QgsProject.instance().mapLayers().values())

    def unload(self):
        for action in self.actions:
            self.iface.removePluginWebMenu(MENU, action)
        QgsProject.instance().layersAdded.disconnect(self.layers_added)
        QgsProject.instance().layersWillBeRemoved.disconnect(self.layers_removed)
        for layer_id in list(self.saver.watched):
            self.saver.unwatch(layer_id)
        if self.provider is not None:
            QgsApplication.processingRegistry().removeProvider(self.provider)

    def layers_added(self, layers):
        for layer in layers:
            try:
                self.saver.watch(layer)
            except Exception as e:  # a service that cannot be reached now: QGIS's own saving stays
                self.iface.messageBar().pushMessage("featurepipe", f"{layer.name()}: {e}", Qgis.Warning)

    def layers_removed(self, layer_ids):
        for layer_id in layer_ids:
            self.saver.unwatch(layer_id)

    def connect(self):
        dialog = ConnectDialog(self.iface.mainWindow())
        if not dialog.exec_():
            return
        url = dialog.url.text().strip()
        connections.save(dialog.name.text(), url, dialog.authcfg)
        for item in dialog.collections.selectedItems():
            layer = connections.layer(url, item.data(Qt.UserRole), dialog.authcfg)
            QgsProject.instance().addMapLayer(layer)

    def show_outcome(self, layer, outcome):
        bar = self.iface.messageBar()
        if outcome.kind == "saved":
            bar.pushMessage("featurepipe", f"{layer.name()}: {outcome.message}", Qgis.Success, 5)
        elif outcome.kind == "conflict":
            ConflictDialog(layer, outcome, self.saver, self.iface.mainWindow()).exec_()
        elif outcome.kind == "invalid":
            layer.selectByIds([p.fid for p in outcome.problems if p.fid is not None])
            lines = [f"feature {p.fid}, {p.field or '(feature)'}: {p.message}" for p in outcome.problems[:10]]
            bar.pushMessage("featurepipe", f"{layer.name()}: nothing was saved; your edits are kept (the features "
                            f"at fault are selected): " + "; ".join(lines), Qgis.Critical, 0)
        elif outcome.kind == "unknown":
            bar.pushMessage("featurepipe", f"{layer.name()}: the service's answer was lost ({outcome.message}); your "
                            "edits are kept: save again, and they are sent under the same Idempotency-Key, so that "
                            "they are written once", Qgis.Critical, 0)
        else:
            bar.pushMessage("featurepipe", f"{layer.name()}: nothing was saved ({outcome.message}); your edits "
                            "are kept", Qgis.Critical, 0)
