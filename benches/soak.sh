#!/usr/bin/env bash
# Soak: perf_analyzer 2.51 at a total concurrency of 64 against `simple` and
# `mlp` over HTTP and gRPC at once (four clients at c16) for SOAK_SECONDS,
# with the server in poll mode and both models' configs rewritten every 30 s
# (so each reloads under load). Records every perf_analyzer window (infer/s,
# p99), the server's RSS every 10 s and the request failures the server
# counted, and prints markdown for docs/reliability.md ("Soak"). Not part of
# `make test`.
#
#   benches/soak.sh        # after `make setup-test` and `make release`
#
# Environment: SOAK_SECONDS (600), NEREID_BIN (target/release/nereid).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${SOAK_SECONDS:-600}
nereid_bin=${NEREID_BIN:-target/release/nereid}
pa=$PWD/.tools/perf_analyzer/perf_analyzer.sh
readonly READY_TIMEOUT_S=60 STOP_TIMEOUT_S=30 WINDOW_MS=5000 RELOAD_EVERY_S=30 RSS_EVERY_S=10
BENCH_TAG=soak
# shellcheck source=benches/lib.sh
source benches/lib.sh

bench_workdir soak
export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$(scripts/ort-path.sh)}
mkdir -p "$work/repo"
cp -r model_repository/simple model_repository/mlp "$work/repo/"
read -r http grpc metrics <<<"$(free_ports)"
"$nereid_bin" --model-repository "$work/repo" --http-port "$http" --grpc-port "$grpc" \
  --metrics-port "$metrics" --http-address 127.0.0.1 --grpc-address 127.0.0.1 \
  --metrics-address 127.0.0.1 --model-control-mode poll >"$work/nereid.log" 2>&1 &
pid=$!
wait_ready "$pid" "http://127.0.0.1:$http/v2/health/ready" "$work/nereid.log" nereid

start=$(date +%s)
end=$((start + seconds))

# client MODEL PROTOCOL: perf_analyzer windows until the end, one CSV line
# "elapsed_s,model,protocol,infer_per_s,p99_us,status" per window.
client() {
  local model=$1 protocol=$2 port=$grpc n=0 csv
  [ "$protocol" = http ] && port=$http
  while (($(date +%s) < end)); do
    n=$((n + 1))
    csv=$work/$model-$protocol-$n.csv
    if timeout 120 "$pa" -m "$model" -i "$protocol" -u "127.0.0.1:$port" -b 1 \
      --concurrency-range 16 --measurement-mode time_windows -p "$WINDOW_MS" \
      -s 100 -r 3 -f "$csv" >"$csv.log" 2>&1; then
      awk -F, -v t=$(($(date +%s) - start)) -v m="$model" -v p="$protocol" '
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i }
        NR == 2 { printf "%d,%s,%s,%d,%d,ok\n", t, m, p, $col["Inferences/Second"], $col["p99 latency"] }' "$csv"
    elif grep -q "Failed to obtain stable measurement" "$csv.log"; then
      # No request failed: the load changed under the window (the last
      # windows, as the other clients stop).
      echo "$(($(date +%s) - start)),$model,$protocol,0,0,unstable"
    else
      # perf_analyzer's own last words.
      echo "$(($(date +%s) - start)),$model,$protocol,0,0,failed: $(grep -v '^\s*$' "$csv.log" | tail -n 1 | tr ',|' ';/')"
    fi
  done >"$work/windows-$model-$protocol.csv"
}

rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$pid/status"; }

for model in simple mlp; do
  for protocol in http grpc; do
    client "$model" "$protocol" &
  done
done

reloads=0
next_reload=$((start + RELOAD_EVERY_S))
echo "elapsed_s,rss_kib" >"$work/rss.csv"
while (($(date +%s) < end)); do
  echo "$(($(date +%s) - start)),$(rss_kib)" >>"$work/rss.csv"
  if (($(date +%s) >= next_reload)); then
    for model in simple mlp; do
      echo "# soak reload $reloads" >>"$work/repo/$model/config.pbtxt"
    done
    reloads=$((reloads + 1))
    next_reload=$((next_reload + RELOAD_EVERY_S))
  fi
  sleep "$RSS_EVERY_S"
done
wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true

failures=$(curl -s "http://127.0.0.1:$metrics/metrics" |
  awk '/^nv_inference_request_failure/ { sum += $NF } END { print sum + 0 }')
successes=$(curl -s "http://127.0.0.1:$metrics/metrics" |
  awk '/^nv_inference_request_success/ { sum += $NF } END { print sum + 0 }')
reloaded=$(grep -c "model folder changed: loading" "$work/nereid.log" || true)

echo "Soak: ${seconds} s, 4 perf_analyzer clients at c16 (simple and mlp, HTTP and gRPC), $reloads config rewrites per model (every ${RELOAD_EVERY_S} s, poll mode); the server reloaded a model $reloaded times."
echo
echo "Server counted $successes successful and $failures failed requests; perf_analyzer windows that failed: $(cat "$work"/windows-*.csv | grep -c failed || true), without a stable measurement: $(cat "$work"/windows-*.csv | grep -c unstable || true)."
echo
echo "| elapsed s | model | protocol | infer/s | p99 µs | status |"
echo "|---:|---|---|---:|---:|---|"
sort -t, -k1,1n "$work"/windows-*.csv | awk -F, '{ printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6 }'
echo
echo "| elapsed s | RSS MiB |"
echo "|---:|---:|"
tail -n +2 "$work/rss.csv" | awk -F, '{ printf "| %s | %.1f |\n", $1, $2 / 1024 }'
tail -n +2 "$work/rss.csv" | awk -F, '
  $1 >= 60 { if (!base) base = $2; last = $2; if ($2 > max) max = $2 }
  END { if (base) printf "\nRSS after the first minute: %.1f MiB, at the end %.1f MiB (%+.1f%%), highest %.1f MiB.\n", base / 1024, last / 1024, 100 * (last - base) / base, max / 1024 }'
