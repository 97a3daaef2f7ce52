"""What the QGIS scripts share: checks that are collected rather than
raised (a run reports every failure), and the logging proxy's log."""
import json

failures = []


def check(cond, what):
    """Note `what` as failed unless `cond`; `cond`."""
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


class ProxyLog:
    """tests/qgis/logging_proxy.py's log: one JSON line per request."""

    def __init__(self, path):
        self.path = path

    def lines(self):
        with open(self.path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def mark(self):
        """Where the log is now, for since()."""
        return len(self.lines())

    def since(self, start):
        """The requests logged since mark() returned `start`."""
        return self.lines()[start:]
