#!/usr/bin/env bash
# A Python with the complete torch==2.13.0 (CUDA libraries and all, several
# GB) in .tools/torch-venv, printed on stdout. Only two things need it:
# scripts/make_torch_models.py, which regenerates the committed TorchScript
# test models, and benches/torch.sh, whose ceiling is python's
# torch.jit.load. Serving and testing need only scripts/setup-libtorch.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.tools/torch-venv
stamp=$venv/.stamp-torch-2.13.0
if [ ! -f "$stamp" ]; then
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q --upgrade pip >&2
    "$venv/bin/pip" install -q torch==2.13.0 numpy onnx >&2
    touch "$stamp"
fi
echo "$PWD/$venv/bin/python"
