#!/usr/bin/env bash
# The GPU check (docs/gpu.md): one short script for a machine with an
# NVIDIA GPU, a driver, and a Python with numpy, torch (CUDA) and
# cuda-python (cuda.bindings), which tritonclient's CUDA shared memory
# utilities use. Nothing is installed there.
#
#   scripts/gpu-check.sh --prepare   (here) builds a stripped release nereid
#                                    and copies tritonclient's pure-Python
#                                    package into target/gpu-check/
#   scripts/gpu-check.sh             (there) runs scripts/gpu_check.py on it;
#                                    the output also goes to $OUT/gpu-check.txt
set -euo pipefail
cd "$(dirname "$0")/.."
kit=target/gpu-check
if [ "${1:-}" = "--prepare" ]; then
    scripts/setup-python.sh
    cargo build --release --bin nereid
    mkdir -p "$kit/python"
    strip -o "$kit/nereid" target/release/nereid
    rm -rf "$kit/python/tritonclient"
    cp -r .venv/lib/python3*/site-packages/tritonclient "$kit/python/"
    # perf_analyzer's binaries are not needed there, nor the gRPC client.
    rm -rf "$kit/python/tritonclient/grpc" "$kit/python/tritonclient/__pycache__"
    du -sh "$kit"
    exit 0
fi
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
command -v nvidia-smi >/dev/null && nvidia-smi -L | tee "$out/nvidia-smi.txt" || true
PYTHONPATH="$PWD/$kit/python${PYTHONPATH:+:$PYTHONPATH}" OUT="$out" \
    python3 scripts/gpu_check.py "$PWD/$kit/nereid" 2>&1 | tee "$out/gpu-check.txt"
exit "${PIPESTATUS[0]}"
