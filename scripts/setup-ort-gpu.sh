#!/usr/bin/env bash
# Puts ONNX Runtime with its CUDA execution provider in .tools/ort-gpu (the
# `onnxruntime-gpu` wheel with the CUDA and cuDNN wheels its `cuda` and
# `cudnn` extras name, all from PyPI) and prints the path of its
# libonnxruntime.so, what ORT_DYLIB_PATH wants. The CUDA libraries' folders
# are found by scripts/cuda-library-path.sh. About 1.5 GB, installed once:
# a stamp file skips the work when it is there.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.tools/ort-gpu
stamp=$dest/.stamp-onnxruntime-gpu-1
if [ ! -f "$stamp" ]; then
    scripts/setup-python.sh >&2
    rm -rf "$dest"
    .venv/bin/pip install -q --no-warn-conflicts --target "$dest" "onnxruntime-gpu[cuda,cudnn]>=1.24,<2" >&2
    touch "$stamp"
fi
ls "$PWD/$dest"/onnxruntime/capi/libonnxruntime.so.* | head -n 1
