#!/usr/bin/env bash
# The sequence batching benchmark: 64 and 256 concurrent sequences of 20
# steps on an ONNX model with implicit state (benches/sequence_repo.py),
# with the direct and the oldest strategy, on nereid and, in the same run,
# on real Triton 2.51 with its native ONNX Runtime backend serving the same
# repository. Writes the "Sequence batching" section of docs/benchmarks.md
# (benches/sequence_report.py).
#
#   TRITON_BACKEND_DIR=... benches/sequence.sh   # after a release build
#
# Without TRITON_BACKEND_DIR (a backends folder holding Triton's ONNX
# Runtime backend, see docs/benchmarks.md) only nereid is measured.
# Environment: SEQ_CONCURRENCIES ("64 256"), SEQ_REQUESTS (requests per
# measurement window, 4000), NEREID_BIN, BENCH_OUT (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BENCH_TAG=sequence
# shellcheck source=benches/lib.sh
source benches/lib.sh
read -r -a concurrencies <<<"${SEQ_CONCURRENCIES:-64 256}"
requests=${SEQ_REQUESTS:-4000}
nereid_bin=${NEREID_BIN:-target/release/nereid}
out=${BENCH_OUT:-docs/benchmarks.md}
pa=$root/.tools/perf_analyzer/perf_analyzer.sh
readonly READY_TIMEOUT_S=180 PA_TIMEOUT_S=300
models=(acc_direct acc_oldest)
servers=nereid
[ -n "${TRITON_BACKEND_DIR:-}" ] && servers="nereid triton"

work=$(mktemp -d "${TMPDIR:-/tmp}/nereid-sequence.XXXXXX")
declare -A server_pid http_port grpc_port
cleanup() {
  local s
  for s in "${!server_pid[@]}"; do stop_server "${server_pid[$s]}"; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/results" "$work/repo"

# "inferences executions" of MODEL on the HTTP PORT, from its statistics.
counts() {
  curl -sf "http://127.0.0.1:$1/v2/models/$2/stats" | python3 -c 'import json, sys
s = json.load(sys.stdin)["model_stats"]
print(sum(int(v["inference_count"]) for v in s), sum(int(v["execution_count"]) for v in s))'
}

scripts/setup-python.sh
scripts/setup-perf-analyzer.sh
ORT_DYLIB_PATH=$(scripts/ort-path.sh)
export ORT_DYLIB_PATH
[ -x "$nereid_bin" ] || cargo build --release --bin nereid
.venv/bin/python benches/sequence_repo.py "$work/repo"

for server in $servers; do
  read -r http grpc metrics <<<"$(free_ports)"
  case $server in
    nereid)
      "$nereid_bin" --model-repository "$work/repo" --http-port "$http" --grpc-port "$grpc" \
        --metrics-port "$metrics" --http-address 127.0.0.1 --grpc-address 127.0.0.1 \
        --metrics-address 127.0.0.1 >"$work/nereid.log" 2>&1 &
      ;;
    triton)
      scripts/setup-triton.sh
      TRITON_HTTP_PORT=$http TRITON_GRPC_PORT=$grpc TRITON_METRICS_PORT=$metrics \
        scripts/run-triton.sh "$work/repo" >"$work/triton.log" 2>&1 &
      ;;
  esac
  server_pid[$server]=$! http_port[$server]=$http grpc_port[$server]=$grpc
  wait_ready "${server_pid[$server]}" "http://127.0.0.1:$http/v2/health/ready" "$work/$server.log" "$server"
done

for model in "${models[@]}"; do
  for c in "${concurrencies[@]}"; do
    for server in $servers; do
      name=${server}_${model}_c${c}
      before=$(cpu_point "${server_pid[$server]}" "${http_port[$server]}" "$model")
      counts_before=$(counts "${http_port[$server]}" "$model")
      if timeout "$PA_TIMEOUT_S" "$pa" -m "$model" -i grpc -u "127.0.0.1:${grpc_port[$server]}" \
        --concurrency-range "$c" --sequence-length 20 --measurement-mode count_windows \
        --measurement-request-count "$requests" -s 50 -r 5 \
        -f "$work/results/$name.csv" >"$work/results/$name.log" 2>&1; then
        log "$name: $(awk -F, 'NR == 2 { printf "%.0f infer/s", $2 }' "$work/results/$name.csv")"
      else
        log "$name: perf_analyzer failed: $(tail -n 2 "$work/results/$name.log" | tr '\n' ' ')"
        rm -f "$work/results/$name.csv"
      fi
      after=$(cpu_point "${server_pid[$server]}" "${http_port[$server]}" "$model")
      echo "$counts_before $(counts "${http_port[$server]}" "$model")" |
        awk '$4 > $2 { printf "%.2f\n", ($3 - $1) / ($4 - $2) }' >"$work/results/$name.batch"
      cpu_env_per_inference "$before" "$after" >"$work/results/$name.cpu" ||
        rm -f "$work/results/$name.cpu"
    done
  done
done

.venv/bin/python benches/sequence_report.py "$work/results" "$out" "$requests" \
  "$(git rev-parse --short=12 HEAD)" "$servers" "${concurrencies[*]}"
log "wrote the Sequence batching section of $out"
