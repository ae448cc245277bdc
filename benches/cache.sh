#!/usr/bin/env bash
# The response cache's hit latency, local against Redis: nereid serving
# the example MLP (small answers) and a 1 MiB identity (large ones) with
# `response_cache { enable: true }`, first with `--cache-config
# local,size=...`, then with a Redis of its own (Debian's redis-server on a
# free loopback port, no persistence) as `--cache-config redis,...`; and the
# MLP without a cache for the price of running it. perf_analyzer 2.51 sends
# the same zero input every time, so all but the first request are hits.
# Writes the "Response cache: local and Redis" section of
# docs/benchmarks.md (benches/cache_report.py).
#
#   benches/cache.sh            # after a release build
#
# Environment: CACHE_REQUESTS (requests per measurement window, 2000),
# NEREID_BIN, BENCH_OUT (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${CACHE_REQUESTS:-2000}
nereid_bin=${NEREID_BIN:-target/release/nereid}
out=${BENCH_OUT:-docs/benchmarks.md}
pa=$PWD/.tools/perf_analyzer/perf_analyzer.sh
readonly READY_TIMEOUT_S=60 PA_TIMEOUT_S=180 STOP_TIMEOUT_S=20
BENCH_TAG=cache
# shellcheck source=benches/lib.sh
source benches/lib.sh

bench_workdir cache
redis_pid=
trap 'stop_server "$redis_pid"; bench_cleanup' EXIT

scripts/setup-python.sh
scripts/setup-perf-analyzer.sh
scripts/setup-redis.sh
export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$(scripts/ort-path.sh)}
[ -x "$nereid_bin" ] || cargo build --release --bin nereid
.venv/bin/python scripts/make_models.py --bench-identity "$work/repo"
cp -r "$work/repo/identity_1mb" "$work/repo/identity_1mb_cached"
sed -i 's/^name: .*/name: "identity_1mb_cached"/' "$work/repo/identity_1mb_cached/config.pbtxt"
printf 'response_cache {\n  enable: true\n}\n' >>"$work/repo/identity_1mb_cached/config.pbtxt"
mkdir -p "$work/results"

read -r redis_port <<<"$(free_ports 1)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$work" >"$work/redis.log" 2>&1 &
redis_pid=$!
until redis-cli -p "$redis_port" ping >/dev/null 2>&1; do sleep 0.05; done

# measure NAME MODEL CONCURRENCY: perf_analyzer's CSV in results/NAME.csv.
measure() {
  local name=$1 model=$2 c=$3 csv=$work/results/$1.csv
  if timeout "$PA_TIMEOUT_S" "$pa" -m "$model" -i grpc -u "127.0.0.1:$grpc" -b 1 \
    --concurrency-range "$c" --measurement-mode count_windows --input-data zero \
    --measurement-request-count "$requests" -s 50 -r 5 -f "$csv" >"$csv.log" 2>&1; then
    log "$name: $(awk -F, 'NR == 2 { printf "%.0f infer/s", $2 }' "$csv")"
  else
    log "$name: perf_analyzer failed: $(tail -n 2 "$csv.log" | tr '\n' ' ')"
    rm -f "$csv"
  fi
}

for cache in local redis; do
  case $cache in
    local) flags=(--cache-config local,size=268435456) ;;
    redis) flags=(--cache-config "redis,host=127.0.0.1" --cache-config "redis,port=$redis_port") ;;
  esac
  read -r http grpc metrics <<<"$(free_ports)"
  "$nereid_bin" --model-repository "$work/repo" --http-port "$http" --grpc-port "$grpc" \
    --metrics-port "$metrics" --http-address 127.0.0.1 --grpc-address 127.0.0.1 \
    --metrics-address 127.0.0.1 "${flags[@]}" >"$work/nereid-$cache.log" 2>&1 &
  pid=$!
  wait_ready "$pid" "http://127.0.0.1:$http/v2/health/ready" "$work/nereid-$cache.log" "nereid ($cache)"
  measure "$cache-mlp-c1" mlp_cached 1
  measure "$cache-mlp-c8" mlp_cached 8
  measure "$cache-identity_1mb-c1" identity_1mb_cached 1
  [ "$cache" = local ] && measure none-mlp-c1 mlp_uncached 1
  for model in mlp_cached identity_1mb_cached; do
    curl -sf "http://127.0.0.1:$http/v2/models/$model/stats" >"$work/results/$cache-$model.stats.json"
  done
  stop_server "$pid"
  pid=
done

.venv/bin/python benches/cache_report.py "$work/results" "$out" "$requests" \
  "$(git rev-parse --short=12 HEAD)" "$(redis-server --version | grep -o 'v=[0-9.]*' | cut -c3-)"
log "wrote the Response cache section of $out"
