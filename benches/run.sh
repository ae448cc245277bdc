#!/usr/bin/env bash
# perf_analyzer 2.51 against nereid and, side by side, against the real Triton
# 2.51 serving the same ONNX files; writes docs/benchmarks.md. Then runs
# benches/batching.sh, which adds its "Dynamic batching" section.
#
# Which Triton: with TRITON_BACKEND_DIR set, Triton serves the very repository
# copy nereid serves (model_repository/simple and mlp, same config.pbtxt)
# through its native ONNX Runtime backend; without it, the wheel's Triton has
# only the Python backend and serves benches/triton_models (ONNX Runtime
# called from model.py), and the report says so.
#
#   benches/run.sh            # or `make bench`, which builds and sets up first
#
# Environment:
#   BENCH_REQUESTS   requests per perf_analyzer measurement window (2000;
#                    a run that does not settle is retried once with twice that)
#   BENCH_SERVERS    which servers to run, in order ("nereid triton")
#   BENCH_OUT        the report to write (docs/benchmarks.md)
#   NEREID_BIN       the nereid binary (target/release/nereid; built if missing)
#   BENCH_READY_TIMEOUT_S  seconds a server gets to become ready (180)
#   BENCH_BATCHING   0 skips benches/batching.sh (its own variables are
#                    documented there)
#   BENCH_MODELS, BENCH_PROTOCOLS, BENCH_CONCURRENCIES
#                    narrow the matrix ("simple mlp", "http grpc", "1 8"),
#                    e.g. for a quick check
#   TRITON_BACKEND_DIR  a Triton backends folder holding
#                    onnxruntime/libtriton_onnxruntime.so (Triton r24.10's
#                    native ONNX Runtime backend) and python/; unset: the
#                    Python-backend comparison
#
# Per cell, the server's CPU time per inference: the user+system ticks of its
# process tree and the sum of inference_count from GET /v2/models/M/stats,
# read just before and just after perf_analyzer (both cover the same span,
# its warm-up windows included).
#
# Both servers are started one after the other (each timed to ready), then
# measured in turn, cell by cell, so that background load on a shared machine
# falls on both alike; the one not measured sits idle. perf_analyzer runs on
# the same machine. Every process started here is stopped on exit (trap); a
# server that does not become ready in time fails the run with its log.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

requests=${BENCH_REQUESTS:-2000}
servers=${BENCH_SERVERS:-nereid triton}
out=${BENCH_OUT:-docs/benchmarks.md}
nereid_bin=${NEREID_BIN:-target/release/nereid}
pa=$root/.tools/perf_analyzer/perf_analyzer.sh
triton_venv=$root/.tools/triton-venv
triton_backend_dir=${TRITON_BACKEND_DIR:-}
# Against Triton's native ONNX Runtime backend the two-step ensemble
# (mlp_pipeline: preprocess -> mlp) and concurrency 64 (where mlp's batches
# fill) are measured too; the Python-backend Triton has twins of simple and
# mlp only.
if [ -n "$triton_backend_dir" ]; then
  default_models="simple mlp mlp_pipeline" default_concurrencies="1 8 64"
else
  default_models="simple mlp" default_concurrencies="1 8"
fi
read -r -a models <<<"${BENCH_MODELS:-$default_models}"
read -r -a protocols <<<"${BENCH_PROTOCOLS:-http grpc}"
read -r -a concurrencies <<<"${BENCH_CONCURRENCIES:-$default_concurrencies}"
readonly READY_TIMEOUT_S=${BENCH_READY_TIMEOUT_S:-180} PA_TIMEOUT_S=120 STOP_TIMEOUT_S=20

BENCH_TAG=bench
# shellcheck source=benches/lib.sh
source benches/lib.sh

# --- processes started here, stopped on any exit ---------------------------

work=$(mktemp -d "${TMPDIR:-/tmp}/nereid-bench.XXXXXX")
# Per server: its pid and ports.
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

setup() {
  scripts/setup-python.sh
  scripts/setup-perf-analyzer.sh
  scripts/setup-triton.sh
  [ -x "$pa" ] || die "perf_analyzer missing: $pa"
  use_venv_onnxruntime
  ort_version=$(.venv/bin/python -c 'import onnxruntime; print(onnxruntime.__version__)')
  if [ -n "$triton_backend_dir" ]; then setup_native_triton; else setup_python_triton; fi
  build_nereid_if_missing
}

# Triton's python models run the same onnxruntime release as nereid links.
setup_python_triton() {
  if [ "$("$triton_venv/bin/python" -c 'import onnxruntime; print(onnxruntime.__version__)' 2>/dev/null)" \
      != "$ort_version" ]; then
    log "installing onnxruntime==$ort_version into $triton_venv"
    "$triton_venv/bin/pip" install -q "onnxruntime==$ort_version" 'numpy<2'
  fi
}

# Checks TRITON_BACKEND_DIR and finds the ONNX Runtime release in it, from
# the name of its libonnxruntime.so.X.Y.Z.
setup_native_triton() {
  local lib
  [ -f "$triton_backend_dir/onnxruntime/libtriton_onnxruntime.so" ] ||
    die "TRITON_BACKEND_DIR=$triton_backend_dir has no onnxruntime/libtriton_onnxruntime.so"
  triton_backend_dir=$(cd "$triton_backend_dir" && pwd)
  lib=$(find "$triton_backend_dir/onnxruntime" -maxdepth 1 -name 'libonnxruntime.so.*.*' | sort | tail -n 1)
  triton_ort_version=${lib##*/libonnxruntime.so.}
}

# What the report says about the Triton measured (string values, so not in
# triton.env, which holds numbers).
record_triton_kind() {
  if [ -n "$triton_backend_dir" ]; then
    printf 'backend=onnxruntime\nort_version=%s\n' "${triton_ort_version:-unknown}"
  else
    printf 'backend=python\nort_version=%s\n' "$ort_version"
  fi >"$work/results/triton.backend"
}

# The copy of model_repository both servers serve (Triton only when it runs
# its native ONNX Runtime backend): just the benchmarked models and the
# models an ensemble among them uses, so that start-up time and memory
# compare like with like.
make_repository() {
  repo=$work/repository
  mkdir -p "$repo"
  local model step
  for model in "${models[@]}"; do
    cp -r "model_repository/$model" "$repo/"
    for step in $(sed -n 's/^ *model_name: *"\(.*\)".*/\1/p' "model_repository/$model/config.pbtxt"); do
      [ -d "$repo/$step" ] || cp -r "model_repository/$step" "$repo/"
    done
  done
}

# --- servers ---------------------------------------------------------------

# Sum of a /proc field (kB) over $server's process tree, and the process count.
tree_kb() {
  local field=$1 file=$2 pid total=0 n=0 kb
  for pid in $(process_tree "${server_pid[$server]}"); do
    kb=$(awk -v f="$field:" '$1 == f { print $2 }' "/proc/$pid/$file" 2>/dev/null || true)
    total=$((total + ${kb:-0}))
    n=$((n + 1))
  done
  echo "$total $n"
}

record_memory() {
  local when=$1 rss pss n
  read -r rss n <<<"$(tree_kb VmRSS status)"
  read -r pss _ <<<"$(tree_kb Pss smaps_rollup)"
  {
    echo "rss_${when}_kb=$rss"
    echo "pss_${when}_kb=$pss"
    echo "processes_${when}=$n"
  } >>"$work/results/$server.env"
}

# Starts $server on fresh ports, notes its pid and ports, and records the
# time from exec to a 200 from /v2/health/ready.
start_server() {
  local http grpc metrics exe pid t0 t1 i
  read -r http grpc metrics <<<"$(free_ports)"
  case $server in
    nereid)
      exe=$(readlink -f "$nereid_bin")
      "$nereid_bin" --model-repository "$repo" \
        --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 \
        --http-port "$http" --grpc-port "$grpc" --metrics-port "$metrics" \
        >"$work/$server.log" 2>&1 &
      ;;
    triton)
      exe=tritonserver
      local triton_repo=$repo
      if [ -z "$triton_backend_dir" ]; then
        triton_repo=benches/triton_models
        # Triton would take a stray __pycache__ for a model folder.
        rm -rf benches/triton_models/__pycache__
      fi
      TRITON_HTTP_PORT=$http TRITON_GRPC_PORT=$grpc TRITON_METRICS_PORT=$metrics \
        TRITON_BACKEND_DIR=$triton_backend_dir \
        scripts/run-triton.sh "$triton_repo" >"$work/$server.log" 2>&1 &
      ;;
  esac
  pid=$!
  server_pid[$server]=$pid http_port[$server]=$http grpc_port[$server]=$grpc
  # The clock starts when the server binary is exec'd: run-triton.sh spends
  # a few hundred ms in python finding paths first, which is not Triton's.
  for ((i = 0; i < 2000; i++)); do
    [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == *"$exe" ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.005
  done
  t0=$(now_ms)
  until curl -sf -o /dev/null "http://127.0.0.1:$http/v2/health/ready"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 40 "$work/$server.log" >&2
      die "$server exited before becoming ready (log above)"
    fi
    if (($(now_ms) - t0 > READY_TIMEOUT_S * 1000)); then
      tail -n 40 "$work/$server.log" >&2
      die "$server not ready after ${READY_TIMEOUT_S}s (log above)"
    fi
    sleep 0.01
  done
  t1=$(now_ms)
  echo "ready_ms=$((t1 - t0))" >>"$work/results/$server.env"
  curl -sf "http://127.0.0.1:$http/v2" >"$work/results/$server.metadata.json" || true
  log "$server ready in $((t1 - t0)) ms (http :$http, grpc :$grpc)"
}

# --- perf_analyzer ---------------------------------------------------------

# The command line, with the per-run values as shell variables; the report
# prints it verbatim.
pa_args() {
  echo "-m \$MODEL -i \$PROTOCOL -u 127.0.0.1:\$PORT -b 1 --concurrency-range \$C" \
    "--measurement-mode count_windows --measurement-request-count $requests -s 50 -r 5 -f \$CSV"
}

# One perf_analyzer run; false when it found no stable measurement.
measure() {
  local model=$1 proto=$2 port=$3 c=$4 count=$5 name=$6
  timeout "$PA_TIMEOUT_S" "$pa" -m "$model" -i "$proto" -u "127.0.0.1:$port" -b 1 \
    --concurrency-range "$c" --measurement-mode count_windows \
    --measurement-request-count "$count" -s 50 -r 5 \
    -f "$work/results/$name.csv" >>"$work/results/$name.log" 2>&1
}

# One cell for $server; an unsettled run gets one more try with windows twice
# as long.
measure_cell() {
  local model=$1 proto=$2 c=$3 port name
  port=${http_port[$server]}
  [ "$proto" = grpc ] && port=${grpc_port[$server]}
  name=${server}_${model}_${proto}_c${c}
  if measure "$model" "$proto" "$port" "$c" "$requests" "$name" ||
    { log "$name: not stable, retrying with $((2 * requests)) requests per window"
      echo "retried with $((2 * requests)) requests per window" >"$work/results/$name.retried"
      measure "$model" "$proto" "$port" "$c" "$((2 * requests))" "$name"; }; then
    log "$name: $(awk -F, 'NR == 2 { printf "%.0f infer/s", $2 }' "$work/results/$name.csv")"
  else
    log "$name: perf_analyzer failed (rc $?): $(tail -n 3 "$work/results/$name.log" | tr '\n' ' ')"
    rm -f "$work/results/$name.csv"
    failures=$((failures + 1))
  fi
}

# measure_cell with the server's CPU ticks and inference count read around
# it (retry included), written to NAME.cpu.
measure_cell_cpu() {
  local model=$1 name=${server}_${1}_${2}_c${3} before after
  before=$(cpu_point "${server_pid[$server]}" "${http_port[$server]}" "$model")
  measure_cell "$@"
  after=$(cpu_point "${server_pid[$server]}" "${http_port[$server]}" "$model")
  if cpu_env_per_inference "$before" "$after" >"$work/results/$name.cpu"; then
    log "$name: $(awk -F= '$1 == "us_per_inference" { print $2 }' "$work/results/$name.cpu") CPU µs/infer"
  else
    log "$name: no CPU per inference (stats before: '$before', after: '$after')"
    rm -f "$work/results/$name.cpu"
  fi
}

# Every cell of the matrix, each server in turn.
run_matrix() {
  local model proto c
  for model in "${models[@]}"; do
    for proto in "${protocols[@]}"; do
      for c in "${concurrencies[@]}"; do
        for server in $servers; do measure_cell_cpu "$model" "$proto" "$c"; done
      done
    done
  done
}

# --- main ------------------------------------------------------------------

setup
mkdir -p "$work/results"
make_repository
record_triton_kind
failures=0
for server in $servers; do
  case $server in nereid | triton) ;; *) die "unknown server '$server' in BENCH_SERVERS" ;; esac
  busy=$(background_busy_pct)
  ((busy < 25)) || log "warning: the machine is already ${busy}% busy; numbers will be skewed"
  echo "busy_before_pct=$busy" >"$work/results/$server.env"
  start_server
  record_memory start
done
started=$(now_ms)
run_matrix
log "measured in $((($(now_ms) - started) / 1000)) s"
for server in $servers; do
  record_memory end
  stop_server "${server_pid[$server]}"
  unset "server_pid[$server]"
done

"$root/.venv/bin/python" benches/report.py \
  --results "$work/results" --out "$out" --requests "$requests" \
  --pa-args "$(pa_args)" --ort-version "$ort_version" --servers "$servers" \
  --nereid-bin "$nereid_bin" --models "${models[*]}" --protocols "${protocols[*]}" \
  --concurrencies "${concurrencies[*]}"
log "wrote $out"
# The dynamic batching benchmark writes its own section of the same report.
batching_rc=0
if [ "${BENCH_BATCHING:-1}" != 0 ]; then
  BENCH_OUT=$out NEREID_BIN=$nereid_bin benches/batching.sh || batching_rc=$?
fi
if ((failures > 0)); then die "$failures perf_analyzer run(s) failed; see $out"; fi
((batching_rc == 0)) || die "benches/batching.sh failed (rc $batching_rc)"
