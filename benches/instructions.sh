#!/usr/bin/env bash
# Instructions per inference under callgrind: the regression guard of
# docs/benchmarks.md ("Instructions per inference"). Starts nereid (release)
# under valgrind with instrumentation off, lets benches/instructions.py
# count a fixed request mix, and stops it.
#
#   benches/instructions.sh        # `make bench` runs it
#
# Environment: NEREID_BIN (target/release/nereid), BENCH_OUT
# (docs/benchmarks.md), INSTR_COUNT (requests per kind, 300),
# BENCH_WRITE=0 prints the figures without writing the report.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_TAG=instructions
# shellcheck source=benches/lib.sh
source benches/lib.sh
command -v valgrind >/dev/null || die "valgrind is needed (apt-get install valgrind)"
nereid_bin=${NEREID_BIN:-target/release/nereid}
out=${BENCH_OUT:-docs/benchmarks.md}
ORT_DYLIB_PATH=$(scripts/ort-path.sh)
export ORT_DYLIB_PATH
work=$(mktemp -d "${TMPDIR:-/tmp}/nereid-instructions.XXXXXX")
pid=
cleanup() {
  [ -n "$pid" ] && stop_server "$pid"
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/repo"
cp -r model_repository/simple model_repository/mlp "$work/repo/"
read -r http grpc metrics <<<"$(free_ports)"
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/callgrind.out" \
  "$nereid_bin" --model-repository "$work/repo" --http-address 127.0.0.1 \
  --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 --http-port "$http" \
  --grpc-port "$grpc" --metrics-port "$metrics" --allow-metrics=false >"$work/nereid.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  curl -sf -o /dev/null "http://127.0.0.1:$http/v2/health/ready" && break
  kill -0 "$pid" 2>/dev/null || { tail -n 30 "$work/nereid.log" >&2; die "nereid exited"; }
  sleep 0.2
done
.venv/bin/python benches/instructions.py --pid "$pid" --http "127.0.0.1:$http" \
  --grpc "127.0.0.1:$grpc" --out "$out" --count "${INSTR_COUNT:-300}" \
  --dump-prefix "$work/callgrind.out"
log "done"
