#!/usr/bin/env bash
# Prints the folders of the CUDA libraries that scripts/setup-ort-gpu.sh and
# scripts/setup-libtorch-cuda.sh installed, joined by ':', for
# LD_LIBRARY_PATH (ONNX Runtime's CUDA provider and libtorch_cuda load them
# by name). Empty when neither ran.
cd "$(dirname "$0")/.." || exit 1
ls -d "$PWD"/.tools/ort-gpu/nvidia/*/lib "$PWD"/.tools/libtorch-cuda/nvidia/*/lib \
    "$PWD"/.tools/libtorch-cuda/nvidia/cu13/lib 2>/dev/null | sort -u | paste -sd:
