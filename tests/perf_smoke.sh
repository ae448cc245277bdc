#!/usr/bin/env bash
# perf_analyzer 2.51 smoke run against nereid: `simple` over HTTP and gRPC.
# Passes when each run completes and reports a positive request count. No
# timing is asserted (that is what benches/ is for).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${NEREID_BIN:-target/debug/nereid}
pa=.tools/perf_analyzer/perf_analyzer.sh
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http=$(port); grpc=$(port); metrics=$(port)
"$bin" --model-repository model_repository --http-address 127.0.0.1 --grpc-address 127.0.0.1 \
  --metrics-address 127.0.0.1 --http-port "$http" --grpc-port "$grpc" --metrics-port "$metrics" \
  >"$work/nereid.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$http/v2/health/ready" >/dev/null && break
  kill -0 $pid 2>/dev/null || { cat "$work/nereid.log"; exit 1; }
  sleep 0.1
done
curl -sf "http://127.0.0.1:$http/v2/health/ready" >/dev/null || { echo "nereid not ready"; cat "$work/nereid.log"; exit 1; }

failed=0
for proto in http grpc; do
  url=127.0.0.1:$http; [ $proto = grpc ] && url=127.0.0.1:$grpc
  csv=$work/$proto.csv
  if timeout 120 "$pa" -m simple -i $proto -u "$url" --concurrency-range 1 \
      --measurement-mode count_windows --measurement-request-count 200 -s 50 -r 5 \
      -f "$csv" >"$work/$proto.out" 2>&1; then
    count=$(awk -F, 'NR==2 {print $2}' "$csv")
    echo "perf_analyzer $proto: $count infer/s"
    awk -F, 'NR==2 { exit !($2 > 0) }' "$csv" || { echo "perf_analyzer $proto reported no throughput"; failed=1; }
  else
    echo "perf_analyzer $proto failed:"; cat "$work/$proto.out"; failed=1
  fi
done
if [ $failed = 0 ]; then echo "2 passed, 0 failed"; else echo "perf smoke failed"; cat "$work/nereid.log" | tail -20; exit 1; fi
