#!/usr/bin/env bash
# A Python with the complete tensorflow-cpu 2.21.0 in .tools/tf-venv,
# printed on stdout. The tests use it to write SavedModels with TensorFlow's
# own API (tests/python/make_savedmodels.py) and to compute TensorFlow's
# answers; benches/tensorflow.sh uses it as the raw-TensorFlow ceiling.
# Serving needs only scripts/setup-tensorflow.sh; this installs the wheel
# that script already downloaded, so the 270 MB come down once.
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=$(scripts/setup-tensorflow.sh)/wheel
venv=.tools/tf-venv
stamp=$venv/.stamp-tensorflow-cpu-2.21.0
if [ ! -f "$stamp" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q --upgrade pip >&2
    "$venv/bin/pip" install -q --find-links "$wheels" tensorflow-cpu==2.21.0 >&2
    touch "$stamp"
fi
echo "$PWD/$venv/bin/python"
