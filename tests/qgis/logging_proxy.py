#!/usr/bin/env python3
"""A logging HTTP proxy in front of featurepipe, for scripts/test-qgis.sh.

    logging_proxy.py LISTEN_PORT UPSTREAM_PORT LOG_FILE

Forwards every request to 127.0.0.1:UPSTREAM_PORT unchanged (Host header
included, so the service's links and Location headers name the proxy and
QGIS keeps coming through it) and appends one JSON line per request to
LOG_FILE: method, the raw target (path and query, as QGIS sent it), status,
body sizes and the answer's Location. The service's own log names a
request's route, not its query string, and what QGIS puts in `filter=`,
`limit=` and `offset=` is what the test checks.
"""
import http.client
import http.server
import json
import os
import sys
import threading
import time

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
    "te", "trailer", "trailers", "transfer-encoding", "upgrade", "content-length",
}

listen_port, upstream_port, log_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
# Optional: RTT_MS, a round trip added to each request and to each new
# connection (the client that far away); CONTROL, a file whose content
# `drop-answer N` (or `bad-gateway N`) makes the next N POST /transactions be
# forwarded and their answers dropped, the connection closed (or a 502 sent
# instead).
rtt = (int(sys.argv[4]) if len(sys.argv) > 4 else 0) / 1000.0
control = sys.argv[5] if len(sys.argv) > 5 else None
log_lock = threading.Lock()
log_file = open(log_path, "a", buffering=1, encoding="utf-8")
seq = 0


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # the JSON log replaces http.server's
        pass

    def setup(self):
        super().setup()
        time.sleep(rtt)  # TCP's handshake

    def lose_this_answer(self):
        """What the control file says of this request's answer, counted down:
        `drop-answer N` (the connection closed, no answer) or `bad-gateway N`
        (a gateway's 502 instead of the answer), for the next N
        POST /transactions; None to pass it on."""
        if not control or self.command != "POST" or not self.path.startswith("/transactions"):
            return None
        with log_lock:
            try:
                with open(control, encoding="utf-8") as f:
                    words = f.read().split()
            except FileNotFoundError:
                return None
            if words[:1] not in (["drop-answer"], ["bad-gateway"]):
                return None
            left = int(words[1]) if len(words) > 1 else 1
            if left > 1:
                with open(control, "w", encoding="utf-8") as f:
                    f.write(f"{words[0]} {left - 1}")
            else:
                os.remove(control)
            return words[0]

    def forward(self):
        start = time.monotonic()
        time.sleep(rtt)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=300)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except Exception as e:  # the service is down or reset the connection
            self.send_error(502, f"proxy: {e}")
            self.record(start, 502, length, 0, None, str(e))
            return
        finally:
            conn.close()
        lost = self.lose_this_answer()
        if lost == "drop-answer":
            self.close_connection = True
            self.record(start, 0, length, 0, None, "answer dropped by the proxy",
                        request_body=body[:2000].decode("utf-8", "replace") if body else None)
            return
        if lost == "bad-gateway":
            gateway = b'{"title": "Bad Gateway", "status": 502, "detail": "the proxy lost the answer"}'
            self.send_response_only(502, "Bad Gateway")
            self.send_header("Content-Type", "application/problem+json")
            self.send_header("Content-Length", str(len(gateway)))
            self.end_headers()
            self.wfile.write(gateway)
            self.record(start, 502, length, len(gateway), None, "answer replaced by the proxy's 502",
                        request_body=body[:2000].decode("utf-8", "replace") if body else None)
            return
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP:
                self.send_header(k, v)
        no_body = self.command == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
        if self.command == "HEAD" and resp.getheader("Content-Length"):
            self.send_header("Content-Length", resp.getheader("Content-Length"))
        elif not no_body:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not no_body:
            self.wfile.write(data)
        error = None
        if resp.status >= 400:
            error = data[:2000].decode("utf-8", "replace")
        self.record(start, resp.status, length, len(data), resp.getheader("Location"), error,
                    body[:2000].decode("utf-8", "replace") if body and (resp.status >= 400 or self.command == "POST") else None)

    def record(self, start, status, sent, received, location, error=None, request_body=None):
        global seq
        with log_lock:
            seq += 1
            entry = {"seq": seq, "method": self.command, "target": self.path, "status": status,
                     "request_bytes": sent, "response_bytes": received,
                     "ms": round((time.monotonic() - start) * 1000, 1)}
            if location:
                entry["location"] = location
            if error:
                entry["error"] = error
            if request_body:
                entry["request_body"] = request_body
            # The headers the plugin's tests check (never credentials' values).
            sent_headers = {k.lower(): v for k, v in self.headers.items()
                            if k.lower() in ("prefer", "idempotency-key", "content-crs", "content-type")}
            if sent_headers:
                entry["headers"] = sent_headers
            if "authorization" in {k.lower() for k in self.headers.keys()} or "x-api-key" in {k.lower() for k in self.headers.keys()}:
                entry["credentials"] = True
            log_file.write(json.dumps(entry) + "\n")

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = forward


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


Server(("127.0.0.1", listen_port), Handler).serve_forever()
