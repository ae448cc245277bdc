#!/usr/bin/env bash
# The TorchScript benchmark: the same MLP as ONNX and as TorchScript, served
# by one nereid in the same run, with libtorch called in-process (python's
# torch.jit.load, batch 1 and 64) as the ceiling. Two MLPs: the example
# (model_repository/mlp and model_repository_torch/mlp_torch), where the
# request path dominates, and the batching benchmark's compute-bound
# mlp_large with its TorchScript twin, made here (too big to commit).
# Writes the "TorchScript" section of
# docs/benchmarks.md (benches/torch_report.py).
#
#   benches/torch.sh      # needs the full torch (scripts/setup-torch-python.sh)
#
# This machine's speed drifts by tens of percent from minute to minute, so
# the two models are measured in alternation, TORCH_ROUNDS times, and the
# report takes each cell's median; the ceiling is measured before and after
# the server and its best run counts.
#
# Environment: TORCH_REQUESTS (requests per measurement window, 2000; a
# tenth of it for mlp_large),
# TORCH_CONCURRENCIES ("1 64"), TORCH_ROUNDS (3), NEREID_BIN (target/release/nereid, built
# with --features nereid-server/torch), BENCH_OUT (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
requests=${TORCH_REQUESTS:-2000}
read -r -a concurrencies <<<"${TORCH_CONCURRENCIES:-1 64}"
rounds=${TORCH_ROUNDS:-3}
nereid_bin=${NEREID_BIN:-target/release/nereid}
out=${BENCH_OUT:-docs/benchmarks.md}
pa=$root/.tools/perf_analyzer/perf_analyzer.sh
models=(mlp mlp_torch mlp_large mlp_large_torch)
readonly READY_TIMEOUT_S=120 PA_TIMEOUT_S=180 STOP_TIMEOUT_S=20
BENCH_TAG=torch
# shellcheck source=benches/lib.sh
source benches/lib.sh

bench_workdir torch
mkdir -p "$work/results"

scripts/setup-python.sh
scripts/setup-perf-analyzer.sh
LIBTORCH=$(scripts/setup-libtorch.sh)
export LIBTORCH
torch_python=$(scripts/setup-torch-python.sh)
ORT_DYLIB_PATH=$(scripts/ort-path.sh)
export ORT_DYLIB_PATH
cargo build --release --bin nereid --features nereid-server/torch

large=$work/large
.venv/bin/python scripts/make_models.py --bench-mlp "$large"
"$torch_python" scripts/make_torch_models.py --mlp-twin "$large/mlp_large"

ceiling() {
  log "ceiling: torch.jit.load in-process"
  "$torch_python" benches/raw_torch.py model_repository_torch/mlp_torch/1/model.pt \
    --batches 1,64 --seconds 5 | tee -a "$work/results/raw_mlp_torch.jsonl" >&2
  "$torch_python" benches/raw_torch.py "$large/mlp_large_torch/1/model.pt" \
    --batches 1,64 --seconds 10 | tee -a "$work/results/raw_mlp_large_torch.jsonl" >&2
}
ceiling

read -r http grpc metrics <<<"$(free_ports)"
"$nereid_bin" --model-repository model_repository --model-repository model_repository_torch \
  --model-repository "$large" \
  --http-port "$http" --grpc-port "$grpc" --metrics-port "$metrics" --http-address 127.0.0.1 \
  --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 >"$work/nereid.log" 2>&1 &
pid=$!
wait_ready "$pid" "http://127.0.0.1:$http/v2/health/ready" "$work/nereid.log" nereid

for ((round = 1; round <= rounds; round++)); do
for c in "${concurrencies[@]}"; do
  for model in "${models[@]}"; do
    name=${model}_c${c}_r${round}
    n=$requests
    [[ $model == mlp_large* ]] && n=$((requests / 10))
    if timeout "$PA_TIMEOUT_S" "$pa" -m "$model" -i grpc -u "127.0.0.1:$grpc" -b 1 \
      --concurrency-range "$c" --measurement-mode count_windows \
      --measurement-request-count "$n" -s 50 -r 5 \
      -f "$work/results/$name.csv" >"$work/results/$name.log" 2>&1; then
      log "$name: $(awk -F, 'NR == 2 { printf "%.0f infer/s, p50 %d us", $2, $7 }' "$work/results/$name.csv")"
    else
      log "$name: perf_analyzer failed: $(tail -n 2 "$work/results/$name.log" | tr '\n' ' ')"
      rm -f "$work/results/$name.csv"
    fi
  done
done
done
stop_server "$pid"
pid=
ceiling
.venv/bin/python benches/torch_report.py "$work/results" "$out" "$requests"
log "wrote the TorchScript section of $out"
