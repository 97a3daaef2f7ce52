"""The plugin's Processing provider."""
import os

from qgis.core import QgsProcessingProvider
from qgis.PyQt.QtGui import QIcon

from .load_algorithm import LoadIntoCollection


class Provider(QgsProcessingProvider):
    """featurepipe's algorithms."""

    def id(self):
        return "featurepipe"

    def name(self):
        return "featurepipe"

    def icon(self):
        return QIcon(os.path.join(os.path.dirname(__file__), "icon.svg"))

    def loadAlgorithms(self):  # noqa: N802 (QGIS's name)
        self.addAlgorithm(LoadIntoCollection())
