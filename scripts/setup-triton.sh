#!/usr/bin/env bash
# Installs the real NVIDIA Triton Inference Server 2.51 (as shipped inside the
# nvidia-pytriton==0.7.0 wheel) into .tools/triton-venv and makes it runnable
# on CPU only.  Used as a reference implementation: see scripts/run-triton.sh,
# tests/triton_ref/ and docs/triton-reference.md.  Idempotent (stamp file).
#
# Layout inside the venv (site-packages/pytriton/tritonserver/):
#   bin/tritonserver             the server (RPATH -> ../../../nvidia_pytriton.libs)
#   backends/python/             python backend (libtriton_python.so); the
#                                stub for our python version is copied here
#   python_backend_stubs/3.X/    triton_python_backend_stub per python version
# The stub needs libpython3.X.so.1.0 from LD_LIBRARY_PATH (run-triton.sh sets it)
# and the python models need numpy<2.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.tools/triton-venv
python=${PYTHON:-python3}
stamp=$venv/.stamp-pytriton-0.7.0
if [ -f "$stamp" ]; then exit 0; fi

"$python" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q 'nvidia-pytriton==0.7.0' 'numpy<2' \
  'tritonclient[http,grpc]==2.51.0' 'requests>=2.31'

pyver=$("$venv/bin/python" -c 'import sys;print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
ts=$("$venv/bin/python" -c 'import pytriton,os;print(os.path.join(os.path.dirname(pytriton.__file__),"tritonserver"))')
stub=$ts/python_backend_stubs/$pyver/triton_python_backend_stub
if [ ! -f "$stub" ]; then
  echo "no python backend stub for python $pyver in $ts/python_backend_stubs" >&2
  exit 1
fi
cp "$stub" "$ts/backends/python/triton_python_backend_stub"
chmod +x "$ts/backends/python/triton_python_backend_stub" "$ts/bin/tritonserver"

libdir=$("$venv/bin/python" -c 'import sysconfig;print(sysconfig.get_config_var("LIBDIR"))')
if [ ! -e "$libdir/libpython$pyver.so.1.0" ]; then
  echo "warning: $libdir/libpython$pyver.so.1.0 missing; python models will not load" >&2
fi
missing=$(LD_LIBRARY_PATH=$libdir ldd "$ts/bin/tritonserver" "$ts/backends/python/libtriton_python.so" \
  "$ts/backends/python/triton_python_backend_stub" | grep 'not found' || true)
if [ -n "$missing" ]; then
  echo "missing shared libraries:" >&2; echo "$missing" >&2; exit 1
fi
touch "$stamp"
echo "tritonserver ready: $ts/bin/tritonserver (start it with scripts/run-triton.sh MODEL_REPO)"
