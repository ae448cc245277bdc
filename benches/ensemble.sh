#!/usr/bin/env bash
# The ensemble benchmark: model_repository/mlp_pipeline (preprocess -> mlp)
# beside each of its steps alone, on nereid and, in the same run, on the
# real Triton 2.51 serving the same ensemble (its steps run the same ONNX
# files through onnxruntime in the Python backend). Writes the "Ensembles"
# section of docs/benchmarks.md (benches/ensemble_report.py).
#
#   benches/ensemble.sh      # after `make setup-test` and a release build
#
# Environment: ENSEMBLE_REQUESTS (requests per measurement window, 1000),
# ENSEMBLE_CONCURRENCIES ("1 16 64"), BENCH_SERVERS ("nereid triton"),
# NEREID_BIN (target/release/nereid), BENCH_OUT (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
requests=${ENSEMBLE_REQUESTS:-1000}
read -r -a concurrencies <<<"${ENSEMBLE_CONCURRENCIES:-1 16 64}"
servers=${BENCH_SERVERS:-nereid triton}
nereid_bin=${NEREID_BIN:-target/release/nereid}
out=${BENCH_OUT:-docs/benchmarks.md}
pa=$root/.tools/perf_analyzer/perf_analyzer.sh
models=(mlp_pipeline preprocess mlp)
readonly READY_TIMEOUT_S=180 PA_TIMEOUT_S=180 STOP_TIMEOUT_S=20
BENCH_TAG=ensemble
# shellcheck source=benches/lib.sh
source benches/lib.sh

bench_workdir ensemble
mkdir -p "$work/results"

scripts/setup-python.sh
scripts/setup-perf-analyzer.sh
scripts/setup-triton.sh
ORT_DYLIB_PATH=$(scripts/ort-path.sh)
export ORT_DYLIB_PATH
ort_version=$(.venv/bin/python -c 'import onnxruntime; print(onnxruntime.__version__)')
if [ "$(.tools/triton-venv/bin/python -c 'import onnxruntime; print(onnxruntime.__version__)' 2>/dev/null)" != "$ort_version" ]; then
  .tools/triton-venv/bin/pip install -q "onnxruntime==$ort_version" 'numpy<2'
fi
[ -x "$nereid_bin" ] || cargo build --release --bin nereid

# Triton's repository: the mlp twin, the preprocess twin and the ensemble.
triton_repo=$work/triton_models
mkdir -p "$triton_repo"
cp benches/triton_models/onnx_model.py "$triton_repo/"
cp -r benches/triton_models/mlp benches/triton_ensemble/preprocess \
  benches/triton_ensemble/mlp_pipeline "$triton_repo/"
nereid_repo=$work/nereid_models
mkdir -p "$nereid_repo"
cp -r model_repository/mlp model_repository/preprocess model_repository/mlp_pipeline "$nereid_repo/"

start() {
  local http grpc metrics
  read -r http grpc metrics <<<"$(free_ports)"
  case $1 in
    nereid)
      "$nereid_bin" --model-repository "$nereid_repo" --http-port "$http" --grpc-port "$grpc" \
        --metrics-port "$metrics" --http-address 127.0.0.1 --grpc-address 127.0.0.1 \
        --metrics-address 127.0.0.1 >"$work/$1.log" 2>&1 &
      ;;
    triton)
      NEREID_ONNX_REPOSITORY=$root/model_repository TRITON_HTTP_PORT=$http \
        TRITON_GRPC_PORT=$grpc TRITON_METRICS_PORT=$metrics \
        scripts/run-triton.sh "$triton_repo" >"$work/$1.log" 2>&1 &
      ;;
  esac
  pid=$! port=$grpc
  wait_ready "$pid" "http://127.0.0.1:$http/v2/health/ready" "$work/$1.log" "$1"
}

for server in $servers; do
  start "$server"
  for model in "${models[@]}"; do
    for c in "${concurrencies[@]}"; do
      name=${server}_${model}_c${c}
      if timeout "$PA_TIMEOUT_S" "$pa" -m "$model" -i grpc -u "127.0.0.1:$port" -b 1 \
        --concurrency-range "$c" --measurement-mode count_windows \
        --measurement-request-count "$requests" -s 50 -r 5 \
        -f "$work/results/$name.csv" >"$work/results/$name.log" 2>&1; then
        log "$name: $(awk -F, 'NR == 2 { printf "%.0f infer/s", $2 }' "$work/results/$name.csv")"
      else
        log "$name: perf_analyzer failed: $(tail -n 2 "$work/results/$name.log" | tr '\n' ' ')"
        rm -f "$work/results/$name.csv"
      fi
    done
  done
  stop_server "$pid"
  pid=
done
.venv/bin/python benches/ensemble_report.py "$work/results" "$out" "$requests"
log "wrote the Ensembles section of $out"
