#!/usr/bin/env bash
# The Python backend benchmark: the same model.py files on nereid and on
# the real Triton 2.51 (pytriton's tritonserver), one server after the
# other in one run, with perf_analyzer at c1 and c8 over gRPC and HTTP;
# also each server's time from start to ready. The models: the worker
# tests' add_sub, and `mlp`, a model.py that runs the example MLP's ONNX
# file through onnxruntime (benches/triton_models/onnx_model.py, as the
# other benches' Triton twin). Prints a markdown table for
# docs/benchmarks.md ("Python backend").
#
#   benches/python_backend.sh      # after `make setup-test`, scripts/setup-triton.sh
#
# Environment: PY_REQUESTS (requests per measurement window, 500),
# PY_ROUNDS (rounds, alternating the servers; medians are reported, 3),
# NEREID_BIN (target/release/nereid), NEREID_BEFORE_BIN (another nereid
# binary, say one built from an earlier commit, measured as the server
# "before" in the same rounds: the report then adds a before/after table).
# Each cell also has the server's CPU per inference: the user + system time
# of its whole process tree (Python workers and Triton's stubs included)
# over the inferences the model counted, across the perf_analyzer run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
requests=${PY_REQUESTS:-500}
rounds=${PY_ROUNDS:-3}
nereid_bin=${NEREID_BIN:-target/release/nereid}
before_bin=${NEREID_BEFORE_BIN:-}
pa=$root/.tools/perf_analyzer/perf_analyzer.sh
readonly READY_TIMEOUT_S=120 PA_TIMEOUT_S=120 STOP_TIMEOUT_S=20
BENCH_TAG=python
# shellcheck source=benches/lib.sh
source benches/lib.sh

bench_workdir python

# The model, with the lines Triton's isolated stub needs to find numpy
# (scripts/run-triton.sh passes the venv's site-packages in PYTHONPATH).
repo=$work/repo
mkdir -p "$repo/add_sub/1"
{
  printf 'import os as _os, sys as _sys\nfor _p in reversed(_os.environ.get("PYTHONPATH", "").split(_os.pathsep)):\n    if _p and _p not in _sys.path:\n        _sys.path.insert(0, _p)\n'
  cat crates/nereid-backend-python/python/tests/models/add_sub/1/model.py
} >"$repo/add_sub/1/model.py"
cp benches/python_models/add_sub/config.pbtxt "$repo/add_sub/"
# The MLP through onnxruntime, in both servers' Python backends.
cp benches/triton_models/onnx_model.py "$repo/"
cp -r benches/triton_models/mlp "$repo/"
export NEREID_ONNX_REPOSITORY=$root/model_repository
ort_version=$(.venv/bin/python -c 'import onnxruntime; print(onnxruntime.__version__)')
if [ "$(.tools/triton-venv/bin/python -c 'import onnxruntime; print(onnxruntime.__version__)' 2>/dev/null)" != "$ort_version" ]; then
  .tools/triton-venv/bin/pip install -q "onnxruntime==$ort_version" 'numpy<2'
fi

start() {
  local http grpc metrics
  read -r http grpc metrics <<<"$(free_ports)"
  case $1 in
    nereid | before)
      local bin=$nereid_bin
      [ "$1" = before ] && bin=$before_bin
      "$bin" --model-repository "$repo" --http-port "$http" --grpc-port "$grpc" \
        --metrics-port "$metrics" --http-address 127.0.0.1 --grpc-address 127.0.0.1 \
        --metrics-address 127.0.0.1 --backend-config="python,python-path=$root/.venv/bin/python" \
        >"$work/$1.log" 2>&1 &
      ;;
    triton)
      TRITON_HTTP_PORT=$http TRITON_GRPC_PORT=$grpc TRITON_METRICS_PORT=$metrics \
        scripts/run-triton.sh "$repo" >"$work/$1.log" 2>&1 &
      ;;
  esac
  pid=$! grpc_port=$grpc http_port=$http
  wait_ready "$pid" "http://127.0.0.1:$http/v2/health/ready" "$work/$1.log" "$1"
}

results=$work/results.tsv
servers="nereid triton"
[ -n "$before_bin" ] && servers="before nereid triton"
for ((round = 1; round <= rounds; round++)); do
  for server in $servers; do
    start "$server"
    printf '%s\tready\t-\t-\t%s\t-\t-\n' "$server" "$READY_MS" >>"$results"
    for model in add_sub mlp; do
      for protocol in grpc http; do
        port=$grpc_port
        [ "$protocol" = http ] && port=$http_port
        for c in 1 8; do
          csv=$work/${server}_${model}_${protocol}_c$c.csv
          cpu_before=$(cpu_point "$pid" "$http_port" "$model")
          if timeout "$PA_TIMEOUT_S" "$pa" -m "$model" -i "$protocol" -u "127.0.0.1:$port" -b 1 \
            --concurrency-range "$c" --measurement-mode count_windows \
            --measurement-request-count "$requests" -s 50 -r 5 -f "$csv" >"$csv.log" 2>&1; then
            line=$(awk -F, 'NR == 2 { printf "%.1f\t%d", $2, $10 }' "$csv")
            cpu=$(cpu_env_per_inference "$cpu_before" "$(cpu_point "$pid" "$http_port" "$model")" |
              sed -n 's/^us_per_inference=//p')
            printf '%s\t%s\t%s\tc%s\t%s\t%s\n' "$server" "$model" "$protocol" "$c" "$line" "${cpu:--}" >>"$results"
            log "$server $model $protocol c$c: $line"
          else
            log "$server $model $protocol c$c: perf_analyzer failed: $(tail -n 2 "$csv.log" | tr '\n' ' ')"
          fi
        done
      done
    done
    stop_server "$pid"
    pid=
  done
done
python3 benches/python_report.py "$results"
