#!/usr/bin/env bash
# Thousands of models on one server (issue 36): a repository of
# MANY_MODELS ONNX models of MANY_MEGABYTES of weights each (different
# seeds, so nothing is shared by accident), made by
# benches/many_models_bench.py from tests/python/many_models.py's generator.
#
#   1. probe: nereid in on-demand mode with no budget; the median of the
#      repository index's memory_bytes once 20 models have loaded, and its
#      resident memory once they have been unloaded again (ONNX Runtime set
#      up). The budget is that memory plus a tenth of the models' footprints.
#   2. budget: nereid --model-control-mode=on_demand --model-memory-budget
#      BUDGET, nothing loaded at start, under MANY_CLIENTS closed-loop
#      HTTP clients drawing models from a Zipf distribution (exponent
#      MANY_ZIPF) for MANY_WARMUP s unmeasured, then MANY_SECONDS measured.
#   3. all: nereid --model-control-mode=explicit --load-model=* (every
#      model loaded at start, pinned, no budget), timed to ready, then the
#      same request stream: the warm requests' reference.
#   4. triton (with TRITON_BACKEND_DIR, a backends folder holding Triton
#      r24.10's native ONNX Runtime backend; skipped without it): Triton
#      2.51 with --model-control-mode=explicit --load-model=* on the same
#      repository, followed until every model has loaded or the machine's
#      available memory falls under MANY_MIN_AVAILABLE_GIB (then stopped);
#      when all loaded, the same request stream too. Then, to find where
#      it stops, Triton on MANY_TRITON_COPIES names per model (each its own
#      folder and config, model.onnx a link to the original: Triton reads
#      every one into a session of its own), followed the same way.
#
# Writes the "Many models" section of docs/benchmarks.md
# (benches/many_models_report.py); BENCH_WRITE=0 prints it instead.
#
#   benches/many_models.sh            # after a release build
#
# Environment: MANY_MODELS (1000), MANY_MEGABYTES (3), MANY_ZIPF (1.0),
# MANY_CLIENTS (64), MANY_SECONDS (60), MANY_WARMUP (15),
# MANY_MIN_AVAILABLE_GIB (6), MANY_TRITON_COPIES (8; 1 skips), MANY_REPO (a repository made before, kept;
# default a fresh one in the work folder), MANY_KEEP (a folder to keep the
# logs and results in), TRITON_BACKEND_DIR, NEREID_BIN, BENCH_OUT
# (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
models=${MANY_MODELS:-1000}
megabytes=${MANY_MEGABYTES:-3}
zipf=${MANY_ZIPF:-1.0}
clients=${MANY_CLIENTS:-64}
seconds=${MANY_SECONDS:-60}
warmup=${MANY_WARMUP:-15}
min_available_gib=${MANY_MIN_AVAILABLE_GIB:-6}
triton_copies=${MANY_TRITON_COPIES:-8}
nereid_bin=${NEREID_BIN:-target/release/nereid}
out=${BENCH_OUT:-docs/benchmarks.md}
triton_backend_dir=${TRITON_BACKEND_DIR:-}
readonly READY_TIMEOUT_S=600 STOP_TIMEOUT_S=30 TRITON_LOAD_TIMEOUT_S=600
BENCH_TAG=many-models
# shellcheck source=benches/lib.sh
source benches/lib.sh
py=.venv/bin/python
bench=benches/many_models_bench.py

bench_workdir many-models
# MANY_KEEP=DIR keeps the logs and results there, however the run ends.
keep() {
  [ -n "${MANY_KEEP:-}" ] || return 0
  mkdir -p "$MANY_KEEP" && cp -r "$work"/*.log "$work/results" "$MANY_KEEP"/ 2>/dev/null || true
}
trap 'keep; bench_cleanup' EXIT
scripts/setup-python.sh
use_venv_onnxruntime
build_nereid_if_missing
[ -z "$triton_backend_dir" ] || [ -f "$triton_backend_dir/onnxruntime/libtriton_onnxruntime.so" ] ||
  die "TRITON_BACKEND_DIR=$triton_backend_dir has no onnxruntime/libtriton_onnxruntime.so"
results=$work/results
mkdir -p "$results"

repo=${MANY_REPO:-$work/repo}
if [ ! -d "$repo/m$(printf %04d $((models - 1)))" ]; then
  log "making $models models of $megabytes MB in $repo"
  t0=$(now_ms)
  $py "$bench" make "$repo" --models "$models" --megabytes "$megabytes"
  log "made in $((($(now_ms) - t0) / 1000)) s ($(du -sh "$repo" | cut -f1))"
fi

# start_nereid NAME FLAGS...: a nereid on free ports, logging to NAME.log;
# sets pid, http, metrics and READY_MS.
start_nereid() {
  local name=$1 grpc
  shift
  read -r http grpc metrics <<<"$(free_ports)"
  "$nereid_bin" --model-repository "$repo" --http-address 127.0.0.1 --grpc-address 127.0.0.1 \
    --metrics-address 127.0.0.1 --http-port "$http" --grpc-port "$grpc" \
    --metrics-port "$metrics" "$@" >"$work/$name.log" 2>&1 &
  pid=$!
  wait_ready "$pid" "http://127.0.0.1:$http/v2/health/ready" "$work/$name.log" "nereid ($name)"
}

# drive NAME: the request stream against the server in pid, into NAME.json.
drive() {
  local name=$1
  shift
  log "$name: $clients clients, Zipf $zipf over $models models, ${warmup}s + ${seconds}s"
  $py "$bench" drive --http "$http" --pid "$pid" --log "$work/$name.log" \
    --out "$results/$name.json" --models "$models" --zipf "$zipf" --clients "$clients" \
    --warmup "$warmup" --seconds "$seconds" "$@" >&2
}

busy=$(background_busy_pct)
((busy < 25)) || log "warning: the machine is already ${busy}% busy; numbers will be skewed"

start_nereid probe --model-control-mode=on_demand
$py "$bench" probe --http "$http" --pid "$pid" --out "$results/probe.json" >&2
stop_server "$pid"
pid=
budget=$($py -c 'import json, sys
p = json.load(open(sys.argv[1]))
print(p["rss_unloaded"] + int(sys.argv[2]) // 10 * p["footprint"])' "$results/probe.json" "$models")
log "budget: $budget bytes"

start_nereid budget --model-control-mode=on_demand --model-memory-budget "$budget"
drive budget --metrics "http://127.0.0.1:$metrics/metrics"
grep "evicted the least recently used model" "$work/budget.log" >"$results/budget.evictions" || true
grep -E '^[EW]' "$work/budget.log" | head -n 20 >"$results/budget.warnings" || true
stop_server "$pid"
pid=

start_nereid all --model-control-mode=explicit --load-model='*'
echo "$READY_MS" >"$results/all.ready_ms"
drive all
stop_server "$pid"
pid=

# start_triton NAME REPO COUNT: Triton loading every model of REPO (COUNT
# of them) at start, followed by `watch` into NAME-load.json; sets pid and
# http. Stopped at once (KILL) when memory ran short, before it takes more.
start_triton() {
  local name=$1 triton_repo=$2 count=$3 grpc
  read -r http grpc metrics <<<"$(free_ports)"
  TRITON_HTTP_PORT=$http TRITON_GRPC_PORT=$grpc TRITON_METRICS_PORT=$metrics \
    TRITON_BACKEND_DIR=$(cd "$triton_backend_dir" && pwd) \
    scripts/run-triton.sh "$triton_repo" --model-control-mode=explicit --load-model='*' \
    --http-address=127.0.0.1 --grpc-address=127.0.0.1 --metrics-address=127.0.0.1 \
    >"$work/$name.log" 2>&1 &
  pid=$!
  log "$name: loading $count models (stopped under $min_available_gib GiB available)"
  $py "$bench" watch --pid "$pid" --log "$work/$name.log" --out "$results/$name-load.json" \
    --models "$count" --min-available $((min_available_gib << 30)) \
    --timeout "$TRITON_LOAD_TIMEOUT_S" >&2
  if grep -q '"reason": "memory"' "$results/$name-load.json"; then
    for p in $(process_tree "$pid"); do kill -KILL "$p" 2>/dev/null || true; done
  fi
  grep -E '^E' "$work/$name.log" | grep -v CudaDriverHelper | head -n 5 >"$results/$name.errors" || true
}

if [ -n "$triton_backend_dir" ]; then
  start_triton triton "$repo" "$models"
  if grep -q '"reason": "all loaded"' "$results/triton-load.json"; then
    wait_ready "$pid" "http://127.0.0.1:$http/v2/health/ready" "$work/triton.log" triton
    drive triton
  fi
  stop_server "$pid"
  pid=
  # Where Triton stops: the same files under more names, until memory runs short.
  if ((triton_copies > 1)); then
    $py "$bench" copies "$repo" "$work/copies" --models "$models" --copies "$triton_copies"
    start_triton triton-copies "$work/copies" $((models * triton_copies))
    stop_server "$pid"
    pid=
  fi
else
  log "Triton skipped: it needs TRITON_BACKEND_DIR (Triton's native ONNX Runtime backend)"
fi

$py benches/many_models_report.py "$results" "$out" "$models" "$megabytes" "$budget" \
  "$(git rev-parse --short=12 HEAD)" "$busy"
[ "${BENCH_WRITE:-1}" = 0 ] || log "wrote the Many models section of $out"
