#!/usr/bin/env bash
# The SavedModel benchmark: the example MLP (model_repository/mlp, 256 →
# 1024 → 1024 → 16) as ONNX and as a Keras model exported to a SavedModel
# with the same weights (benches/tensorflow_models.py reads them out of the
# ONNX file), served by one nereid in the same run, with TensorFlow called
# in-process (python's tf.saved_model.load, batch 1 and 64) as the ceiling.
# Both models batch dynamically up to 64 with a 2 ms queue delay. Writes the
# "TensorFlow SavedModel" section of docs/benchmarks.md
# (benches/tensorflow_report.py): throughput, p50 and the server's CPU per
# inference.
#
#   benches/tensorflow.sh
#
# This machine's speed drifts from minute to minute, so the two models are
# measured in alternation, TF_ROUNDS times, and the report takes each
# cell's median; the ceiling is measured before and after the server and
# its best run counts.
#
# Environment: TF_REQUESTS (requests per measurement window, 2000),
# TF_CONCURRENCIES ("1 64"), TF_ROUNDS (3), NEREID_BIN
# (target/release/nereid), BENCH_OUT (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
requests=${TF_REQUESTS:-2000}
read -r -a concurrencies <<<"${TF_CONCURRENCIES:-1 64}"
rounds=${TF_ROUNDS:-3}
nereid_bin=${NEREID_BIN:-target/release/nereid}
out=${BENCH_OUT:-docs/benchmarks.md}
pa=$root/.tools/perf_analyzer/perf_analyzer.sh
models=(mlp mlp_tf)
readonly READY_TIMEOUT_S=120 PA_TIMEOUT_S=180 STOP_TIMEOUT_S=20
BENCH_TAG=tensorflow
# shellcheck source=benches/lib.sh
source benches/lib.sh

bench_workdir tensorflow
mkdir -p "$work/results" "$work/repo"

scripts/setup-python.sh
scripts/setup-perf-analyzer.sh
library=$(scripts/setup-tensorflow.sh)
tf_python=$(scripts/setup-tensorflow-python.sh)
use_venv_onnxruntime
build_nereid_if_missing

.venv/bin/python benches/tensorflow_models.py weights model_repository/mlp/1/model.onnx "$work/weights.npz"
"$tf_python" benches/tensorflow_models.py savedmodel "$work/weights.npz" "$work/repo" 2>/dev/null

ceiling() {
  log "ceiling: tf.saved_model.load in-process"
  "$tf_python" benches/raw_tensorflow.py "$work/repo/mlp_tf/1/model.savedmodel" \
    --batches 1,64 --seconds 5 2>/dev/null | tee -a "$work/results/raw_mlp_tf.jsonl" >&2
}
ceiling

read -r http grpc metrics <<<"$(free_ports)"
"$nereid_bin" --model-repository model_repository --model-repository "$work/repo" \
  --tensorflow-library-dir "$library" --backend-config="python,python-path=$root/.venv/bin/python" \
  --http-port "$http" --grpc-port "$grpc" --metrics-port "$metrics" --http-address 127.0.0.1 \
  --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 >"$work/nereid.log" 2>&1 &
pid=$!
wait_ready "$pid" "http://127.0.0.1:$http/v2/health/ready" "$work/nereid.log" nereid

for ((round = 1; round <= rounds; round++)); do
  for c in "${concurrencies[@]}"; do
    for model in "${models[@]}"; do
      name=${model}_c${c}_r${round}
      before=$(cpu_point "$pid" "$http" "$model")
      if timeout "$PA_TIMEOUT_S" "$pa" -m "$model" -i grpc -u "127.0.0.1:$grpc" -b 1 \
        --concurrency-range "$c" --measurement-mode count_windows \
        --measurement-request-count "$requests" -s 50 -r 5 \
        -f "$work/results/$name.csv" >"$work/results/$name.log" 2>&1; then
        cpu_env_per_inference "$before" "$(cpu_point "$pid" "$http" "$model")" >"$work/results/$name.cpu" ||
          rm -f "$work/results/$name.cpu"
        log "$name: $(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i }
          NR == 2 { printf "%.0f infer/s, p50 %d us", $col["Inferences/Second"], $col["p50 latency"] }' \
          "$work/results/$name.csv")"
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
.venv/bin/python benches/tensorflow_report.py "$work/results" "$out" "$requests"
log "wrote the TensorFlow SavedModel section of $out"
