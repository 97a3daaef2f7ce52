"""HTTP to a featurepipe service through QGIS's network stack.

QgsBlockingNetworkRequest goes through QGIS's proxy settings and applies the
connection's authentication configuration (an API key or a bearer token kept
in QGIS's authentication database), as QGIS's own providers do.
"""
import json
import time
import uuid

from qgis.core import QgsBlockingNetworkRequest
from qgis.PyQt.QtCore import QByteArray, QUrl
from qgis.PyQt.QtNetwork import QNetworkReply, QNetworkRequest

# How often a request whose answer was lost (the network, or 502/503/504)
# is sent again with the same Idempotency-Key, and the first pause.
RETRIES = 4
FIRST_PAUSE = 0.25


class Answer:
    """A service's answer: status (0 when none came), headers, body."""

    def __init__(self, status, headers, body, error=""):
        self.status = status
        self.headers = headers
        self.body = body
        self.error = error

    def json(self):
        """The body as JSON, or None."""
        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None

    @property
    def detail(self):
        """Why the service refused, in its words (a problem's `detail`), or why no answer came."""
        return (self.json() or {}).get("detail") or self.error or f"HTTP {self.status}"

    @property
    def lost(self):
        """No answer, or a gateway's or a busy service's: the outcome is not known
        (a keyed request is then sent again and written once)."""
        return self.status == 0 or self.status in (502, 503, 504)

    def __repr__(self):
        return f"Answer({self.status}, {self.body[:200]!r}, error={self.error!r})"


class Client:
    """One featurepipe service: its base URL and QGIS authentication config id."""

    def __init__(self, url, authcfg=""):
        self.url = url.rstrip("/")
        self.authcfg = authcfg or ""

    def get(self, path, headers=None):
        """GET `path` (relative to the service)."""
        return self._send("GET", path, None, headers or {})

    def post_keyed(self, path, document, headers=None, key=None, on_retry=None):
        """POST under an Idempotency-Key (a new one unless given), sent again
        with the same key while the answer is lost: the service writes it once
        and replays its answer. The last answer, and the key."""
        key = key or str(uuid.uuid4())
        headers = dict(headers or {}, **{"Idempotency-Key": key})
        body = json.dumps(document).encode("utf-8") if not isinstance(document, (bytes, bytearray)) else document
        pause = FIRST_PAUSE
        answer = self._send("POST", path, body, headers)
        for attempt in range(RETRIES):
            if not answer.lost and answer.status != 409:
                break
            # 409 idempotency-key-in-use: the first attempt is still running.
            if answer.status == 409 and (answer.json() or {}).get("type", "").rsplit(":", 1)[-1] != "idempotency-key-in-use":
                break
            if on_retry:
                on_retry(attempt + 1, answer)
            time.sleep(pause)
            pause *= 2
            answer = self._send("POST", path, body, headers)
        return answer, key

    def _send(self, method, path, body, headers):
        url = path if path.startswith(("http://", "https://")) else self.url + path
        request = QNetworkRequest(QUrl(url))
        request.setRawHeader(b"Accept", b"application/json")
        if body is not None:
            request.setHeader(QNetworkRequest.ContentTypeHeader, headers.pop("Content-Type", "application/json"))
        for name, value in headers.items():
            request.setRawHeader(name.encode("ascii"), str(value).encode("utf-8"))
        blocking = QgsBlockingNetworkRequest()
        if self.authcfg:
            blocking.setAuthCfg(self.authcfg)
        if method == "GET":
            code = blocking.get(request, True)
        elif method == "POST":
            code = blocking.post(request, QByteArray(body), True)
        else:
            raise ValueError(method)
        reply = blocking.reply()
        status = reply.attribute(QNetworkRequest.HttpStatusCodeAttribute) or 0
        content = bytes(reply.content())
        names = reply.rawHeaderList()
        answer_headers = {bytes(n).decode("latin-1").lower(): bytes(reply.rawHeader(n)).decode("latin-1") for n in names}
        error = "" if code == QgsBlockingNetworkRequest.NoError else blocking.errorMessage()
        if status == 0 and reply.error() == QNetworkReply.NoError and not error:
            error = "no answer"
        return Answer(int(status), answer_headers, content, error)
