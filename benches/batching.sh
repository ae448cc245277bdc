#!/usr/bin/env bash
# Dynamic batching on a compute-bound MLP: perf_analyzer against nereid
# serving mlp_large (256-4096-4096-4096-16, made here by
# scripts/make_models.py --bench-mlp, 139 MB of weights, too big to commit)
# with and without its dynamic_batching block, at
# concurrency 1 to 64, beside ONNX Runtime called in-process (the raw_ort
# example) at batch 1 to 64; then the same batching config with 1 or 2
# instances and 1 or 2 intra-op threads. Writes the "Dynamic batching"
# section of docs/benchmarks.md and the plot docs/batching.png.
#
#   benches/batching.sh       # benches/run.sh (`make bench`) runs it last
#
# Environment:
#   BATCH_MODEL           mlp_large (made here), or mlp (model_repository/mlp)
#   BATCH_CONCURRENCIES   perf_analyzer concurrencies ("1 4 16 64")
#   BATCH_PROTOCOLS       protocols for batched against unbatched ("grpc http")
#   BATCH_SWEEP_PROTOCOL  protocol for the instances × threads sweep (grpc)
#   BATCH_SWEEP           0 skips that sweep (1)
#   BATCH_WINDOW_MS       perf_analyzer measurement window, ms (2000; a run
#                         that does not settle is retried once with twice that)
#   BATCH_RAW_SECONDS     raw_ort seconds per batch size (2)
#   BENCH_OUT             the report whose batching section is replaced
#                         (docs/benchmarks.md)
#   BATCH_PLOT            the plot (docs/batching.png)
#   NEREID_BIN            the nereid binary (target/release/nereid; built if missing)
#   NEREID_REV            what the report says that binary was built from
#                         (default: git describe of this checkout)
#   BATCH_KEEP_RESULTS    a folder to copy the raw results into (none)
#   RAW_ORT_BIN           the raw_ort example (target/release/examples/raw_ort;
#                         built if missing)
#
# Every server config runs at once on its own ports and they are measured
# cell by cell in turn, so background load on a shared machine falls on all
# alike; the ones not measured sit idle. perf_analyzer shares the machine's
# cores with the server. Around each run the script reads the model's
# statistics (inferences per execution, batch sizes) and how much CPU other
# processes took.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

concurrencies=(${BATCH_CONCURRENCIES:-1 4 16 64})
protocols=(${BATCH_PROTOCOLS:-grpc http})
sweep_protocol=${BATCH_SWEEP_PROTOCOL:-grpc}
window_ms=${BATCH_WINDOW_MS:-2000}
raw_seconds=${BATCH_RAW_SECONDS:-2}
out=${BENCH_OUT:-docs/benchmarks.md}
plot=${BATCH_PLOT:-docs/batching.png}
nereid_bin=${NEREID_BIN:-target/release/nereid}
raw_bin=${RAW_ORT_BIN:-target/release/examples/raw_ort}
pa=$root/.tools/perf_analyzer/perf_analyzer.sh
# BATCH_MODEL=mlp measures model_repository/mlp instead (256-1024-1024-16).
MODEL=${BATCH_MODEL:-mlp_large}
case $MODEL in
  mlp_large | mlp) ;;
  *) echo "BATCH_MODEL must be mlp_large or mlp, not '$MODEL'" >&2; exit 2 ;;
esac
readonly MODEL
bench_venv=$root/.tools/bench-venv
readonly MATPLOTLIB=matplotlib==3.11.2
readonly READY_TIMEOUT_S=${BENCH_READY_TIMEOUT_S:-180} PA_TIMEOUT_S=90 STOP_TIMEOUT_S=20

BENCH_TAG=batching
# shellcheck source=benches/lib.sh
source benches/lib.sh

# Server configs: name, then mlp_config.py flags. The first two are compared
# on every protocol; the rest (the sweep) on $sweep_protocol.
main_configs=(unbatched batched)
sweep_configs=(b_i2 b_i1_t1 b_i1_t2 b_i2_t1 b_i2_t2)
declare -A config_flags=(
  [unbatched]="--no-dynamic-batching"
  [batched]=""
  [b_i2]="--instances 2"
  [b_i1_t1]="--instances 1 --intra-threads 1"
  [b_i1_t2]="--instances 1 --intra-threads 2"
  [b_i2_t1]="--instances 2 --intra-threads 1"
  [b_i2_t2]="--instances 2 --intra-threads 2"
)
[ "${BATCH_SWEEP:-1}" = 0 ] && sweep_configs=()
configs=("${main_configs[@]}" "${sweep_configs[@]}")

# --- processes started here, stopped on any exit ---------------------------

work=$(mktemp -d "${TMPDIR:-/tmp}/nereid-batching.XXXXXX")
results=$work/results
mkdir -p "$results"
declare -A server_pid=() http_port=() grpc_port=()

cleanup() {
  local rc=$? s
  for s in "${!server_pid[@]}"; do stop_server "${server_pid[$s]}"; done
  server_pid=()
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- setup -----------------------------------------------------------------

models=$work/models
[ "$MODEL" = mlp ] && models=$root/model_repository

setup() {
  scripts/setup-python.sh
  scripts/setup-perf-analyzer.sh
  [ -x "$pa" ] || die "perf_analyzer missing: $pa"
  # The layer sizes, as scripts/make_models.py builds them.
  MODEL_LAYERS=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "scripts"); import make_models as m
print("-".join(map(str, {"mlp": m.MLP_SIZES, "mlp_large": m.MLP_LARGE_SIZES}[sys.argv[1]])))' "$MODEL")
  if [ "$MODEL" = mlp_large ]; then
    log "making $MODEL ($MODEL_LAYERS) in $models"
    .venv/bin/python scripts/make_models.py --bench-mlp "$models"
  fi
  use_venv_onnxruntime
  build_nereid_if_missing
  build_raw_ort_if_missing
  # matplotlib only for the plot, in its own venv so .venv stays what the
  # tests need.
  if [ ! -f "$bench_venv/.stamp-$MATPLOTLIB" ]; then
    log "installing $MATPLOTLIB into $bench_venv"
    python3 -m venv "$bench_venv"
    "$bench_venv/bin/pip" install -q "$MATPLOTLIB"
    touch "$bench_venv/.stamp-$MATPLOTLIB"
  fi
}

# --- raw ONNX Runtime ------------------------------------------------------

# raw_ort with the given intra-op threads (0: ONNX Runtime's default); the
# CPU other processes took meanwhile goes beside its CSV.
raw_ort() {
  local name=$1 threads=$2 before after
  log "raw_ort $name (intra-op threads ${threads/#0/default}, ${raw_seconds}s per batch size)"
  before=$(cpu_snapshot)
  "$raw_bin" --model "$models/$MODEL/1/model.onnx" --intra-threads "$threads" \
    --seconds "$raw_seconds" --csv "$results/raw_$name.csv" >"$results/raw_$name.log"
  after=$(cpu_snapshot)
  cpu_env "$before" "$after" >"$results/raw_$name.env"
  sed 's/^/  /' "$results/raw_$name.log" >&2
}

# --- servers ---------------------------------------------------------------

# Starts nereid on a repository holding only the $MODEL variant $config.
start_config() {
  local config=$1 http grpc metrics repo pid t0
  read -r http grpc metrics <<<"$(free_ports 3)"
  repo=$work/repo_$config
  mkdir -p "$repo/$MODEL"
  # The weights are large: hard-link them rather than copy them per config
  # (a symbolic link out of the repository is refused, as in Triton).
  cp -rl "$models/$MODEL/1" "$repo/$MODEL/1"
  # shellcheck disable=SC2086 # the flags are words
  python3 benches/mlp_config.py "$models/$MODEL/config.pbtxt" ${config_flags[$config]} \
    >"$repo/$MODEL/config.pbtxt"
  cp "$repo/$MODEL/config.pbtxt" "$results/$config.config.pbtxt"
  "$nereid_bin" --model-repository "$repo" \
    --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 \
    --http-port "$http" --grpc-port "$grpc" --metrics-port "$metrics" \
    >"$work/$config.log" 2>&1 &
  pid=$!
  server_pid[$config]=$pid http_port[$config]=$http grpc_port[$config]=$grpc
  t0=$(now_ms)
  until curl -sf -o /dev/null "http://127.0.0.1:$http/v2/models/$MODEL/ready"; do
    if ! kill -0 "$pid" 2>/dev/null || (($(now_ms) - t0 > READY_TIMEOUT_S * 1000)); then
      tail -n 40 "$work/$config.log" >&2
      die "nereid with config '$config' did not become ready (log above)"
    fi
    sleep 0.01
  done
  # The config as the server resolved it (autofilled fields included).
  curl -sf "http://127.0.0.1:$http/v2/models/$MODEL/config" >"$results/$config.config.json"
}

# --- perf_analyzer ---------------------------------------------------------

pa_args() {
  echo "-m $MODEL -i \$PROTOCOL -u 127.0.0.1:\$PORT -b 1 --concurrency-range \$C" \
    "--measurement-mode time_windows -p $window_ms -s 50 -r 5 -f \$CSV"
}

# One perf_analyzer run; false when it found no stable measurement.
perf() {
  local proto=$1 port=$2 c=$3 window=$4 name=$5
  timeout "$PA_TIMEOUT_S" "$pa" -m "$MODEL" -i "$proto" -u "127.0.0.1:$port" -b 1 \
    --concurrency-range "$c" --measurement-mode time_windows -p "$window" -s 50 -r 5 \
    -f "$results/$name.csv" >>"$results/$name.log" 2>&1
}

# One cell: the model's statistics and the CPU snapshot before and after a
# perf_analyzer run (retried once with a window twice as long).
measure() {
  local config=$1 proto=$2 c=$3 port name before after stats
  port=${http_port[$config]}
  [ "$proto" = grpc ] && port=${grpc_port[$config]}
  name=${config}_${proto}_c${c}
  stats=http://127.0.0.1:${http_port[$config]}/v2/models/$MODEL/stats
  curl -sf "$stats" >"$results/$name.before.json"
  before=$(cpu_snapshot "${server_pid[$config]}")
  if perf "$proto" "$port" "$c" "$window_ms" "$name" ||
    { log "$name: not stable, retrying with $((2 * window_ms)) ms windows"
      echo "retried=1" >"$results/$name.env"
      perf "$proto" "$port" "$c" "$((2 * window_ms))" "$name"; }; then
    after=$(cpu_snapshot "${server_pid[$config]}")
    curl -sf "$stats" >"$results/$name.after.json"
    cpu_env "$before" "$after" >>"$results/$name.env"
    log "$name: $(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "p50 latency") p = i }
      NR == 2 { printf "%.0f infer/s, p50 %d µs", $2, $p }' "$results/$name.csv")"
  else
    log "$name: perf_analyzer failed: $(tail -n 3 "$results/$name.log" | tr '\n' ' ')"
    rm -f "$results/$name.csv"
    failures=$((failures + 1))
  fi
}

run_cells() {
  local proto c config
  for proto in "${protocols[@]}"; do
    for c in "${concurrencies[@]}"; do
      for config in "${main_configs[@]}"; do measure "$config" "$proto" "$c"; done
      if [ "$proto" = "$sweep_protocol" ]; then
        for config in "${sweep_configs[@]}"; do measure "$config" "$proto" "$c"; done
      fi
    done
  done
  # The sweep's protocol may not be among the compared ones.
  if [[ " ${protocols[*]} " != *" $sweep_protocol "* ]]; then
    for c in "${concurrencies[@]}"; do
      for config in "${sweep_configs[@]}"; do measure "$config" "$sweep_protocol" "$c"; done
    done
  fi
}

# --- main ------------------------------------------------------------------

setup
failures=0
busy=$(background_busy_pct)
((busy < 25)) || log "warning: the machine is already ${busy}% busy; numbers will be skewed"
{
  echo "busy_before_pct=$busy"
  echo "load_before=$(cut -d' ' -f1 /proc/loadavg)"
} >"$results/run.env"
started=$(now_ms)
raw_ort default_before 0
raw_ort t1 1
for config in "${configs[@]}"; do start_config "$config"; done
log "started ${#configs[@]} nereid servers: ${configs[*]}"
run_cells
for config in "${configs[@]}"; do
  stop_server "${server_pid[$config]}"
  unset "server_pid[$config]"
done
raw_ort default_after 0
{
  echo "load_after=$(cut -d' ' -f1 /proc/loadavg)"
  echo "elapsed_s=$((($(now_ms) - started) / 1000))"
} >>"$results/run.env"
log "measured in $((($(now_ms) - started) / 1000)) s"

if [ -n "${BATCH_KEEP_RESULTS:-}" ]; then
  mkdir -p "$BATCH_KEEP_RESULTS"
  cp -r "$results"/. "$BATCH_KEEP_RESULTS"/
fi
"$bench_venv/bin/python" benches/batching_report.py \
  --results "$results" --out "$out" --plot "$plot" --pa-args "$(pa_args)" \
  --concurrencies "${concurrencies[*]}" --protocols "${protocols[*]}" \
  --sweep-protocol "$sweep_protocol" --sweep-configs "${sweep_configs[*]}" \
  --nereid-bin "$nereid_bin" --model "$MODEL" --layers "$MODEL_LAYERS"
log "wrote the batching section of $out and $plot"
if ((failures > 0)); then die "$failures perf_analyzer run(s) failed; see $out"; fi
