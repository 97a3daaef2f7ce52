"""featurepipe services the user connected to: their URLs in QGIS's settings,
their credentials in QGIS's authentication database (never in the project
or the settings), as an "API header" configuration QGIS applies to every
request of the service's layers and of the plugin."""
from qgis.core import QgsApplication, QgsAuthMethodConfig, QgsSettings

from .client import Client
from .edits import Schema, layer_source

ROOT = "featurepipe/connections"


def credential_headers(api_key="", token=""):
    """The headers featurepipe takes credentials in."""
    if token:
        return {"Authorization": f"Bearer {token}"}
    if api_key:
        return {"X-API-Key": api_key}
    return {}


def store_credentials(name, api_key="", token=""):
    """Keep the credentials in QGIS's authentication database: the new
    configuration's id ("" when there are none)."""
    headers = credential_headers(api_key, token)
    if not headers:
        return ""
    manager = QgsApplication.authManager()
    config = QgsAuthMethodConfig("APIHeader")
    config.setName(f"featurepipe: {name}")
    for header, value in headers.items():
        config.setConfig(header, value)
    ok, config = manager.storeAuthenticationConfig(config)
    if not ok:
        raise RuntimeError("QGIS's authentication database refused the credentials (is its master password set?)")
    return config.id()


def save(name, url, authcfg=""):
    """Remember a connection."""
    settings = QgsSettings()
    settings.setValue(f"{ROOT}/{name}/url", url)
    settings.setValue(f"{ROOT}/{name}/authcfg", authcfg)


def saved():
    """{name: (url, authcfg)} of the remembered connections."""
    settings = QgsSettings()
    settings.beginGroup(ROOT)
    names = settings.childGroups()
    settings.endGroup()
    return {n: (settings.value(f"{ROOT}/{n}/url", ""), settings.value(f"{ROOT}/{n}/authcfg", "")) for n in names}


def collections(url, authcfg=""):
    """[(id, title)] of the service's collections, or raise with why not."""
    answer = Client(url, authcfg).get("/collections")
    if answer.status != 200:
        raise RuntimeError(f"the service's collections could not be read: {answer.detail}")
    return [(c["id"], c.get("title") or c["id"]) for c in answer.json().get("collections", [])]


def schema(client, collection):
    """The Schema of `collection` (its `/schema`), or raise with why not."""
    answer = client.get(f"/collections/{collection}/schema")
    if answer.status != 200:
        raise RuntimeError(f"the schema of collection '{collection}' could not be read: {answer.detail}")
    return Schema(answer.json())


def layer(url, collection, authcfg="", name=None):
    """A featurepipe layer of `collection` (QGIS's OGC API - Features provider)."""
    from qgis.core import QgsVectorLayer

    return QgsVectorLayer(layer_source(url, collection, authcfg), name or collection, "OAPIF")
