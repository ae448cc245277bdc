#!/usr/bin/env bash
# Prints the path of the ONNX Runtime shared library inside .venv (from the
# `onnxruntime` wheel); empty output when it is not installed.
cd "$(dirname "$0")/.." || exit 1
ls "$PWD"/.venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* 2>/dev/null | head -n 1
