#!/usr/bin/env bash
# Two of Triton's protocol extensions on nereid, each against the same run
# without it, with perf_analyzer 2.51:
#  - system shared memory: `identity_1mb` (1 MiB of FP32 in, the same out)
#    with tensors in the request body and with `--shared-memory system`,
#    over HTTP and gRPC at c1 and c8;
#  - the response cache: the example MLP with `response_cache` (every
#    request the same, so all but the first are hits) against the same MLP
#    without, gRPC c1;
#  - the trace extension: the uncached MLP again with every request traced
#    (TIMESTAMPS, rate 1, written 1000 traces per file), HTTP and gRPC c1.
# Prints a markdown table for docs/benchmarks.md ("Protocol extensions").
#
#   benches/protocol_extensions.sh     # after `make setup-test` and `make release`
#
# Environment: EXT_REQUESTS (requests per measurement window, 300),
# NEREID_BIN (target/release/nereid).
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${EXT_REQUESTS:-300}
nereid_bin=${NEREID_BIN:-target/release/nereid}
pa=$PWD/.tools/perf_analyzer/perf_analyzer.sh
readonly READY_TIMEOUT_S=60 PA_TIMEOUT_S=180 STOP_TIMEOUT_S=20
BENCH_TAG=extensions
# shellcheck source=benches/lib.sh
source benches/lib.sh

bench_workdir extensions

export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$(scripts/ort-path.sh)}
.venv/bin/python scripts/make_models.py --bench-identity "$work/repo"
read -r http grpc metrics <<<"$(free_ports)"
"$nereid_bin" --model-repository "$work/repo" --http-port "$http" --grpc-port "$grpc" \
  --metrics-port "$metrics" --http-address 127.0.0.1 --grpc-address 127.0.0.1 \
  --metrics-address 127.0.0.1 --cache-config local,size=67108864 \
  --trace-config "triton,file=$work/trace.json" >"$work/nereid.log" 2>&1 &
pid=$!
wait_ready "$pid" "http://127.0.0.1:$http/v2/health/ready" "$work/nereid.log" nereid

# measure NAME MODEL PROTOCOL CONCURRENCY [perf_analyzer args...]: one
# table row, "| NAME | PROTOCOL | cC | infer/s | p50 µs | p99 µs |".
measure() {
  local name=$1 model=$2 protocol=$3 c=$4 port=$grpc csv
  shift 4
  [ "$protocol" = http ] && port=$http
  csv=$work/$name-$protocol-$c.csv
  if timeout "$PA_TIMEOUT_S" "$pa" -m "$model" -i "$protocol" -u "127.0.0.1:$port" -b 1 \
    --concurrency-range "$c" --measurement-mode count_windows \
    --measurement-request-count "$requests" -s 50 -r 5 -f "$csv" "$@" >"$csv.log" 2>&1; then
    # Columns by name: with a cache, perf_analyzer adds cache columns.
    awk -F, -v n="$name" -v p="$protocol" -v c="$c" '
      NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i }
      NR == 2 { printf "| %s | %s | c%s | %d | %d | %d |\n", n, p, c,
                $col["Inferences/Second"], $col["p50 latency"], $col["p99 latency"] }' "$csv"
  else
    log "$name $protocol c$c: perf_analyzer failed: $(tail -n 2 "$csv.log" | tr '\n' ' ')"
    printf '| %s | %s | c%s | failed | | |\n' "$name" "$protocol" "$c"
  fi
}

echo "| run | protocol | concurrency | infer/s | p50 µs | p99 µs |"
echo "|---|---|---|---:|---:|---:|"
for protocol in http grpc; do
  for c in 1 8; do
    measure "identity_1mb, tensors in the body" identity_1mb "$protocol" "$c"
    measure "identity_1mb, system shared memory" identity_1mb "$protocol" "$c" \
      --shared-memory system --output-shared-memory-size 1048576
  done
done
measure "mlp, response cache (hits)" mlp_cached grpc 1 --input-data zero
measure "mlp, no cache" mlp_uncached grpc 1 --input-data zero
measure "mlp, not traced" mlp_uncached http 1 --input-data zero
curl -sf -X POST "http://127.0.0.1:$http/v2/models/mlp_uncached/trace/setting" \
  -d '{"trace_level":["TIMESTAMPS"],"trace_rate":"1","log_frequency":"1000"}' >/dev/null
for protocol in http grpc; do
  measure "mlp, every request traced" mlp_uncached "$protocol" 1 --input-data zero
done
traces=$(cat "$work"/trace.json.* 2>/dev/null | grep -o '"model_name"' | wc -l)
log "trace files: $(ls "$work" | grep -c '^trace.json.') holding $traces traces"
curl -s "http://127.0.0.1:$http/v2/models/mlp_cached/stats" | python3 -c '
import json, sys
s = json.load(sys.stdin)["model_stats"][0]["inference_stats"]
hit, miss = s["cache_hit"], s["cache_miss"]
hit_us = hit["ns"] / max(hit["count"], 1) / 1000
miss_us = miss["ns"] / max(miss["count"], 1) / 1000
hits, misses = hit["count"], miss["count"]
print(f"\nCache: {hits:,} hits ({hit_us:.1f} µs each to find), "
      f"{misses:,} misses ({miss_us:.1f} µs each to look up and insert).")'
