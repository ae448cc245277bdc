#!/usr/bin/env bash
# Starts the real Triton 2.51 (installed by scripts/setup-triton.sh), CPU only.
#
#   scripts/run-triton.sh MODEL_REPOSITORY [extra tritonserver args...]
#
# Ports: TRITON_HTTP_PORT (18000), TRITON_GRPC_PORT (18001),
#        TRITON_METRICS_PORT (18002).
# TRITON_BACKEND_DIR: the --backend-directory (the wheel's own backends
#        folder, which holds only the python backend). Point it at a folder
#        that also holds onnxruntime/libtriton_onnxruntime.so to serve
#        platform "onnxruntime_onnx" models with Triton's native backend.
# e.g.  scripts/run-triton.sh tests/triton_ref/models --log-verbose=1
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 MODEL_REPOSITORY [tritonserver args...]" >&2
  exit 2
fi
repo=$(cd "$1" && pwd); shift
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.tools/triton-venv
if [ ! -f "$venv/.stamp-pytriton-0.7.0" ]; then "$root/scripts/setup-triton.sh"; fi
py=$venv/bin/python
ts=$("$py" -c 'import pytriton,os;print(os.path.join(os.path.dirname(pytriton.__file__),"tritonserver"))')
libdir=$("$py" -c 'import sysconfig;print(sysconfig.get_config_var("LIBDIR"))')
site=$("$py" -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')

# libpython for the python backend stub; the pytriton-bundled libs for the rest.
export LD_LIBRARY_PATH="$libdir:$(dirname "$ts")/../nvidia_pytriton.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The stub embeds the base interpreter in isolated mode (PYTHONPATH is ignored by
# python itself); the model.py files under tests/triton_ref/models read it and
# prepend it to sys.path to find the venv's numpy.
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export CUDA_VISIBLE_DEVICES=""

exec "$ts/bin/tritonserver" \
  --model-repository="$repo" \
  --backend-directory="${TRITON_BACKEND_DIR:-$ts/backends}" \
  --cache-directory="$ts/caches" \
  --http-port="${TRITON_HTTP_PORT:-18000}" \
  --grpc-port="${TRITON_GRPC_PORT:-18001}" \
  --metrics-port="${TRITON_METRICS_PORT:-18002}" \
  --allow-gpu-metrics=false \
  --allow-cpu-metrics=true \
  --strict-readiness=true \
  --exit-on-error=false \
  "$@"
