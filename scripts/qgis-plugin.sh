#!/usr/bin/env bash
# `make qgis-plugin`: the QGIS plugin (clients/qgis/featurepipe) as the ZIP
# QGIS's "Install from ZIP" takes: one top folder, featurepipe/, with the
# plugin's files (no caches). Prints the ZIP's path.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${CARGO_TARGET_DIR:-target}/qgis/featurepipe.zip
mkdir -p "$(dirname "$out")"
python3 - "$out" <<'PY'
import os, sys, zipfile
out = sys.argv[1]
src = "clients/qgis/featurepipe"
with zipfile.ZipFile(out + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(root, name)
            z.write(path, os.path.join("featurepipe", os.path.relpath(path, src)))
os.replace(out + ".tmp", out)
PY
echo "$out"
