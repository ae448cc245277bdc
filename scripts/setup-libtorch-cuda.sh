#!/usr/bin/env bash
# Adds the CUDA libraries libtorch 2.13 needs to run on GPUs (the versions
# the torch==2.13.0 wheel pins: cuBLAS, cuDNN, NCCL and the rest of CUDA
# 13.0) in .tools/libtorch-cuda; scripts/setup-libtorch.sh installs only the
# two that libtorch needs to load on a CPU machine. Several GB, installed
# once; scripts/cuda-library-path.sh puts their folders on the loader's path.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.tools/libtorch-cuda
stamp=$dest/.stamp-torch-2.13.0
if [ ! -f "$stamp" ]; then
    scripts/setup-python.sh >&2
    rm -rf "$dest"
    .venv/bin/pip install -q --no-warn-conflicts --target "$dest" \
        "cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.3" \
        nvidia-cudnn-cu13==9.20.0.48 nvidia-cusparselt-cu13==0.8.1 \
        nvidia-nccl-cu13==2.29.7 nvidia-nvshmem-cu13==3.4.5 >&2
    touch "$stamp"
fi
