"""HTTP to a featurepipe service through QGIS's network stack.

QgsBlockingNetworkRequest goes through QGIS's proxy settings and applies the
connection's authentication configuration (an API key or a bearer token kept
in QGIS's authentication database), as QGIS's own providers do.
"""
import functools
import json
import time
import uuid

from qgis.core import QgsApplication, QgsBlockingNetworkRequest, QgsNetworkAccessManager
from qgis.PyQt.QtCore import QByteArray, QEventLoop, QUrl
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

    def post(self, path, body, headers=None):
        """POST `body` (bytes) once, without a key."""
        return self._send("POST", path, body, dict(headers or {}))

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

    def post_all(self, path, bodies, headers, jobs, on_answer):
        """POST each (body, key, tag) of the iterable `bodies` under its
        Idempotency-Key (none when None), `jobs` at once, from this thread's event loop
        rather than a Python thread each (whose blocking requests Qt warns
        cannot use timers: "Timers can only be used with threads started
        with QThread"); `on_answer(answer, tag)` as
        each is answered, and stop taking bodies when it returns False. A
        lost answer is sent again with the same key, as by post_keyed (one
        without a key is answered as lost)."""
        manager = QgsNetworkAccessManager.instance()
        loop = QEventLoop()
        pending = iter(bodies)
        flying = {}
        ahead = []
        lost = []
        going = [True]
        # Raised by `bodies` or `on_answer` (a slot must not raise): raised
        # again once the requests in flight are answered.
        broken = []

        def finished(reply):
            body, key, tag = flying.pop(id(reply))[0]
            answer = _answer(reply, "" if reply.error() == QNetworkReply.NoError else reply.errorString())
            reply.deleteLater()
            try:
                if key is not None and (answer.lost or answer.status == 409):
                    lost.append((body, key, tag))
                elif on_answer(answer, tag) is False:
                    going[0] = False
            except Exception as e:  # noqa: BLE001
                broken.append(e)
                going[0] = False
            take()

        def made():
            """The next item of `bodies`, or None (and why, in `broken`)."""
            try:
                return ahead.pop() if ahead else next(pending, None)
            except Exception as e:  # noqa: BLE001
                broken.append(e)
                going[0] = False
                return None

        def take():
            while going[0] and len(flying) < jobs:
                item = made()
                if item is None:
                    break
                send(item)
            # The next body is made now, while requests fly, so that an
            # answer is followed by the next request at once.
            if going[0] and flying and not ahead:
                item = made()
                if item is not None:
                    ahead.append(item)
            if not flying:
                loop.quit()

        def send(item):
            body, key, _ = item
            request = self._request(path, body, dict(headers, **({"Idempotency-Key": key} if key else {})))
            if self.authcfg:
                QgsApplication.authManager().updateNetworkRequest(request, self.authcfg)
            reply = manager.post(request, QByteArray(body))
            slot = functools.partial(finished, reply)
            reply.finished.connect(slot)
            # The reply's wrapper and its slot are held here until it is
            # answered: a cycle of the two alone was collected as garbage
            # (json.loads of a large answer ran the collector), its answer
            # never came and the load hung.
            flying[id(reply)] = (item, reply, slot)

        take()
        if flying:
            loop.exec()
        if broken:
            raise broken[0]
        for body, key, tag in lost:
            answer, _ = self.post_keyed(path, body, dict(headers), key=key)
            on_answer(answer, tag)

    def _request(self, path, body, headers):
        url = path if path.startswith(("http://", "https://")) else self.url + path
        request = QNetworkRequest(QUrl(url))
        request.setRawHeader(b"Accept", b"application/json")
        if body is not None:
            request.setHeader(QNetworkRequest.ContentTypeHeader, headers.pop("Content-Type", "application/json"))
        for name, value in headers.items():
            request.setRawHeader(name.encode("ascii"), str(value).encode("utf-8"))
        return request

    def _send(self, method, path, body, headers):
        request = self._request(path, body, headers)
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
        error = "" if code == QgsBlockingNetworkRequest.NoError else blocking.errorMessage()
        return _answer(reply, error, bytes(reply.content()))


def _answer(reply, error, content=None):
    """The Answer of a finished reply (a QgsNetworkReplyContent or a
    QNetworkReply, whose body is read here unless given)."""
    status = reply.attribute(QNetworkRequest.HttpStatusCodeAttribute) or 0
    if content is None:
        content = bytes(reply.readAll())
    names = reply.rawHeaderList()
    headers = {bytes(n).decode("latin-1").lower(): bytes(reply.rawHeader(n)).decode("latin-1") for n in names}
    if status == 0 and reply.error() == QNetworkReply.NoError and not error:
        error = "no answer"
    return Answer(int(status), headers, content, error)
