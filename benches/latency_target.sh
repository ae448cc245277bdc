#!/usr/bin/env bash
# Batching to a latency target against fixed delays: perf_analyzer against
# nereid serving mlp_large (made here by scripts/make_models.py --bench-mlp)
# with `nereid.latency_target_ms` set (one server per target), nereid with
# the config's fixed 2 ms delay, and real Triton 2.51 with its native ONNX
# Runtime backend at several fixed `max_queue_delay_microseconds`, with and
# without preferred batch sizes; closed-loop concurrency 1 to 64
# (perf_analyzer), then open-loop rates up to past capacity, where nereid
# sheds (benches/latency_target_load.py: perf_analyzer 2.51 stops at the
# first refused request). Writes the "Batching to a latency target" section
# of docs/benchmarks.md.
#
#   TRITON_BACKEND_DIR=/path/to/backends benches/latency_target.sh
#
# TRITON_BACKEND_DIR must hold onnxruntime/libtriton_onnxruntime.so (Triton's
# native ONNX Runtime backend, as benches/run.sh uses it); without it the
# script stops, since the comparison is the point.
#
# Environment:
#   LT_TARGETS_MS          nereid targets, one server each ("25 50 100")
#   LT_TRITON_DELAYS_US    Triton delays without preferred sizes
#                          ("0 500 2000 5000 10000")
#   LT_PREFERRED_DELAYS_US Triton delays with preferred_batch_size
#                          [ 8, 16, 32 ] ("2000 10000")
#   LT_CONCURRENCIES       perf_analyzer concurrencies ("1 4 8 16 32 64")
#   LT_RATES               request rates for the open-loop sweep, infer/s
#                          ("1000 1500 3000"; empty skips it)
#   LT_RATE_SECONDS        seconds of sending per open-loop cell (8)
#   LT_PROTOCOL            grpc or http (grpc)
#   LT_WINDOW_MS           perf_analyzer measurement window (3000)
#   BENCH_OUT              the report (docs/benchmarks.md)
#   NEREID_BIN             the nereid binary (target/release/nereid; built if
#                          missing)
#   LT_KEEP_RESULTS        a folder to copy the raw results into (none)
#
# Every server runs at once on its own ports and they are measured cell by
# cell in turn, so background load falls on all alike; perf_analyzer shares
# the machine's cores with the server measured.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

targets=(${LT_TARGETS_MS:-25 50 100})
delays=(${LT_TRITON_DELAYS_US:-0 500 2000 5000 10000})
preferred_delays=(${LT_PREFERRED_DELAYS_US:-2000 10000})
concurrencies=(${LT_CONCURRENCIES:-1 4 8 16 32 64})
rates=(${LT_RATES-1000 1500 3000})
rate_seconds=${LT_RATE_SECONDS:-8}
protocol=${LT_PROTOCOL:-grpc}
window_ms=${LT_WINDOW_MS:-3000}
out=${BENCH_OUT:-docs/benchmarks.md}
nereid_bin=${NEREID_BIN:-target/release/nereid}
triton_backend_dir=${TRITON_BACKEND_DIR:-}
pa=$root/.tools/perf_analyzer/perf_analyzer.sh
readonly MODEL=mlp_large PREFERRED="8, 16, 32"
readonly READY_TIMEOUT_S=${BENCH_READY_TIMEOUT_S:-180} PA_TIMEOUT_S=120 STOP_TIMEOUT_S=20

BENCH_TAG=latency-target
# shellcheck source=benches/lib.sh
source benches/lib.sh

work=$(mktemp -d "${TMPDIR:-/tmp}/nereid-latency-target.XXXXXX")
results=$work/results
mkdir -p "$results"
declare -A server_pid=() http_port=() grpc_port=() metrics_port=()

cleanup() {
  local rc=$? s
  for s in "${!server_pid[@]}"; do stop_server "${server_pid[$s]}"; done
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- setup -----------------------------------------------------------------

models=$work/models

setup() {
  [ -f "$triton_backend_dir/onnxruntime/libtriton_onnxruntime.so" ] ||
    die "TRITON_BACKEND_DIR='$triton_backend_dir' has no onnxruntime/libtriton_onnxruntime.so (Triton's native ONNX Runtime backend)"
  triton_backend_dir=$(cd "$triton_backend_dir" && pwd)
  scripts/setup-python.sh
  scripts/setup-perf-analyzer.sh
  [ -x "$pa" ] || die "perf_analyzer missing: $pa"
  log "making $MODEL in $models"
  .venv/bin/python scripts/make_models.py --bench-mlp "$models"
  use_venv_onnxruntime
  build_nereid_if_missing
}

# --- servers ---------------------------------------------------------------

# The config of server $1: the made config without its dynamic_batching
# block, then the block and parameters that server is about.
config_text() {
  local name=$1
  python3 benches/mlp_config.py "$models/$MODEL/config.pbtxt" --no-dynamic-batching
  case $name in
    nereid_fixed) echo "dynamic_batching { max_queue_delay_microseconds: 2000 }" ;;
    nereid_t*)
      echo "dynamic_batching { }"
      echo "parameters { key: \"nereid.latency_target_ms\" value: { string_value: \"${name#nereid_t}\" } }"
      ;;
    triton_d*)
      local delay=${name#triton_d} extra=
      if [[ $delay == *_p ]]; then
        delay=${delay%_p}
        extra=" preferred_batch_size: [ $PREFERRED ]"
      fi
      echo "dynamic_batching { max_queue_delay_microseconds: $delay$extra }"
      # Triton ignores parameters it does not know: this config loads there.
      echo 'parameters { key: "nereid.latency_target_ms" value: { string_value: "50" } }'
      ;;
  esac
}

start_config() {
  local name=$1 http grpc metrics repo pid t0
  read -r http grpc metrics <<<"$(free_ports 3)"
  repo=$work/repo_$name
  mkdir -p "$repo/$MODEL"
  cp -rl "$models/$MODEL/1" "$repo/$MODEL/1"
  config_text "$name" >"$repo/$MODEL/config.pbtxt"
  cp "$repo/$MODEL/config.pbtxt" "$results/$name.config.pbtxt"
  case $name in
    nereid_*)
      "$nereid_bin" --model-repository "$repo" \
        --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 \
        --http-port "$http" --grpc-port "$grpc" --metrics-port "$metrics" \
        >"$work/$name.log" 2>&1 &
      ;;
    triton_*)
      TRITON_HTTP_PORT=$http TRITON_GRPC_PORT=$grpc TRITON_METRICS_PORT=$metrics \
        TRITON_BACKEND_DIR=$triton_backend_dir \
        scripts/run-triton.sh "$repo" >"$work/$name.log" 2>&1 &
      ;;
  esac
  pid=$!
  server_pid[$name]=$pid http_port[$name]=$http grpc_port[$name]=$grpc metrics_port[$name]=$metrics
  t0=$(now_ms)
  until curl -sf -o /dev/null "http://127.0.0.1:$http/v2/models/$MODEL/ready"; do
    if ! kill -0 "$pid" 2>/dev/null || (($(now_ms) - t0 > READY_TIMEOUT_S * 1000)); then
      tail -n 40 "$work/$name.log" >&2
      die "$name did not become ready (log above)"
    fi
    sleep 0.05
  done
  curl -sf "http://127.0.0.1:$http/v2/models/$MODEL/config" >"$results/$name.config.json"
  log "$name ready"
}

# --- perf_analyzer ---------------------------------------------------------

pa_args() {
  echo "-m $MODEL -i $protocol -u 127.0.0.1:\$PORT -b 1 --concurrency-range \$C" \
    "--measurement-mode time_windows -p $window_ms -s 50 -r 5 -f \$CSV"
}

# One closed-loop cell (the arguments after the cell name go to
# perf_analyzer). The stats, the server's CPU ticks and (nereid) the shed count before and
# after; perf_analyzer's exit status is kept, since a run with refused
# requests may end in error.
measure() {
  local name=$1 cell=$2 port stats rc
  shift 2
  port=${grpc_port[$name]}
  [ "$protocol" = http ] && port=${http_port[$name]}
  stats=http://127.0.0.1:${http_port[$name]}/v2/models/$MODEL/stats
  curl -sf "$stats" >"$results/$cell.before.json"
  curl -sf "http://127.0.0.1:${metrics_port[$name]}/metrics" >"$results/$cell.before.prom" || true
  echo "before=$(cpu_point "${server_pid[$name]}" "${http_port[$name]}" "$MODEL")" >"$results/$cell.env"
  rc=0
  timeout "$PA_TIMEOUT_S" "$pa" -m "$MODEL" -i "$protocol" -u "127.0.0.1:$port" -b 1 "$@" \
    --measurement-mode time_windows -p "$window_ms" -s 50 -r 5 \
    -f "$results/$cell.csv" >"$results/$cell.log" 2>&1 || rc=$?
  if ((rc == 2)); then
    # No stable measurement: once more with windows twice as long.
    rc=0
    echo "retried=1" >>"$results/$cell.env"
    timeout "$PA_TIMEOUT_S" "$pa" -m "$MODEL" -i "$protocol" -u "127.0.0.1:$port" -b 1 "$@" \
      --measurement-mode time_windows -p "$((2 * window_ms))" -s 50 -r 5 \
      -f "$results/$cell.csv" >>"$results/$cell.log" 2>&1 || rc=$?
  fi
  echo "after=$(cpu_point "${server_pid[$name]}" "${http_port[$name]}" "$MODEL")" >>"$results/$cell.env"
  echo "rc=$rc" >>"$results/$cell.env"
  echo "ticks_per_s=$(getconf CLK_TCK)" >>"$results/$cell.env"
  curl -sf "$stats" >"$results/$cell.after.json"
  curl -sf "http://127.0.0.1:${metrics_port[$name]}/metrics" >"$results/$cell.after.prom" || true
  if [ -f "$results/$cell.csv" ]; then
    log "$cell: $(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "p99 latency") p = i }
      NR == 2 { printf "%.0f infer/s, p99 %d µs", $2, $p }' "$results/$cell.csv") (rc $rc)"
  else
    log "$cell: no result (rc $rc): $(tail -n 2 "$results/$cell.log" | tr '\n' ' ')"
  fi
}

# One open-loop cell: RATE requests a second for $rate_seconds s, over gRPC.
open_loop() {
  local name=$1 cell=$2 rate=$3
  curl -sf "http://127.0.0.1:${metrics_port[$name]}/metrics" >"$results/$cell.before.prom" || true
  echo "before=$(cpu_point "${server_pid[$name]}" "${http_port[$name]}" "$MODEL")" >"$results/$cell.env"
  .venv/bin/python benches/latency_target_load.py --url "127.0.0.1:${grpc_port[$name]}" \
    --model "$MODEL" --rate "$rate" --seconds "$rate_seconds" >"$results/$cell.json" \
    2>"$results/$cell.log" || log "$cell: the load generator failed: $(tail -n 2 "$results/$cell.log")"
  echo "after=$(cpu_point "${server_pid[$name]}" "${http_port[$name]}" "$MODEL")" >>"$results/$cell.env"
  echo "ticks_per_s=$(getconf CLK_TCK)" >>"$results/$cell.env"
  curl -sf "http://127.0.0.1:${metrics_port[$name]}/metrics" >"$results/$cell.after.prom" || true
  log "$cell: $(cat "$results/$cell.json" 2>/dev/null)"
}

# --- main ------------------------------------------------------------------

setup
servers=(nereid_fixed)
for t in "${targets[@]}"; do servers+=("nereid_t$t"); done
for d in "${delays[@]}"; do servers+=("triton_d$d"); done
for d in "${preferred_delays[@]}"; do servers+=("triton_d${d}_p"); done
busy=$(background_busy_pct)
((busy < 25)) || log "warning: the machine is already ${busy}% busy; numbers will be skewed"
{
  echo "busy_before_pct=$busy"
  echo "load_before=$(cut -d' ' -f1 /proc/loadavg)"
} >"$results/run.env"
started=$(now_ms)
for s in "${servers[@]}"; do start_config "$s"; done
log "started ${#servers[@]} servers: ${servers[*]}"
for c in "${concurrencies[@]}"; do
  for s in "${servers[@]}"; do measure "$s" "${s}_c$c" --concurrency-range "$c"; done
done
# Open loop up to past capacity: nereid's targets against Triton's delays.
for r in "${rates[@]}"; do
  for s in "${servers[@]}"; do
    [ "$s" = nereid_fixed ] && continue
    open_loop "$s" "${s}_r$r" "$r"
  done
done
for s in "${servers[@]}"; do
  stop_server "${server_pid[$s]}"
  unset "server_pid[$s]"
done
{
  echo "load_after=$(cut -d' ' -f1 /proc/loadavg)"
  echo "elapsed_s=$((($(now_ms) - started) / 1000))"
} >>"$results/run.env"
log "measured in $((($(now_ms) - started) / 1000)) s"

if [ -n "${LT_KEEP_RESULTS:-}" ]; then
  mkdir -p "$LT_KEEP_RESULTS"
  cp -r "$results"/. "$LT_KEEP_RESULTS"/
fi
python3 benches/latency_target_report.py --results "$results" --out "$out" \
  --pa-args "$(pa_args)" --servers "${servers[*]}" --concurrencies "${concurrencies[*]}" \
  --rates "${rates[*]}" --rate-seconds "$rate_seconds" --protocol "$protocol" \
  --nereid-bin "$nereid_bin" --triton-backend-dir "$triton_backend_dir"
log "wrote the latency-target section of $out"
