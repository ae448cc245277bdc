#!/usr/bin/env bash
# Puts TensorFlow's C API (libtensorflow_cc.so.2 and
# libtensorflow_framework.so.2, from the `tensorflow-cpu` wheel on PyPI) in
# .tools/tensorflow and prints that folder, which is what the SavedModel
# backend's --backend-config=tensorflow,library-dir=... or TENSORFLOW_DIR
# wants. The wheel (about 270 MB) is kept beside them, so
# scripts/setup-tensorflow-python.sh installs the same build without a second
# download; a stamp file skips the work when it is already there.
#
# The two libraries need nothing but libstdc++ and libc: no libpython, so
# whatever Python the wheel was built for, its C API is the same.
set -euo pipefail
cd "$(dirname "$0")/.."
version=2.21.0
dest=.tools/tensorflow
stamp=$dest/.stamp-tensorflow-cpu-$version
if [ ! -f "$stamp" ]; then
    # The project's venv has a pip; a bare system python3 may not.
    scripts/setup-python.sh >&2
    rm -rf "$dest"
    mkdir -p "$dest/wheel"
    .venv/bin/pip download -q --no-deps --only-binary=:all: \
        --dest "$dest/wheel" "tensorflow-cpu==$version" >&2
    wheel=$(ls "$dest"/wheel/tensorflow_cpu-"$version"-*.whl)
    .venv/bin/python - "$wheel" "$dest" <<'PY'
import shutil, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in ("libtensorflow_cc.so.2", "libtensorflow_framework.so.2"):
        with z.open(f"tensorflow/{name}") as src, open(f"{dest}/{name}", "wb") as out:
            shutil.copyfileobj(src, out)
PY
    touch "$stamp"
fi
echo "$PWD/$dest"
