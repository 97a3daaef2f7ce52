"""featurepipe for QGIS: a whole edit session in one request."""


def classFactory(iface):  # noqa: N802 (QGIS's name)
    """The plugin QGIS loads."""
    from .plugin import FeaturepipePlugin

    return FeaturepipePlugin(iface)
