#!/usr/bin/env bash
# Puts libtorch 2.13 (what `tch` 0.26 links against) in .tools/libtorch and
# prints the path of its `torch` folder, which is what LIBTORCH wants.
#
# PyPI has no CPU-only torch wheel, so this installs the CUDA build without
# its dependencies, plus the two CUDA libraries libtorch_cuda.so must find to
# load at all. The result (about 1.25 GB) is kept between runs: a stamp file
# skips the work when it is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.tools/libtorch
stamp=$dest/.stamp-torch-2.13.0
if [ ! -f "$stamp" ]; then
    # The project's venv has a pip; a bare system python3 may not.
    scripts/setup-python.sh >&2
    rm -rf "$dest"
    .venv/bin/pip install -q --no-deps --target "$dest" \
        torch==2.13.0 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85 >&2
    touch "$stamp"
fi
echo "$PWD/$dest/torch"
