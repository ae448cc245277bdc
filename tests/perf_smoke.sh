#!/usr/bin/env bash
# perf_analyzer 2.51 smoke run against nereid: `simple` over HTTP and gRPC,
# with tensors in the request body and in system shared memory.
# Passes when each run completes and reports a positive request count. No
# timing is asserted (that is what benches/ is for), and stability is
# loosely asked for (-s 100 -r 10): on a busy 2-core machine a tight window
# made the smoke fail without anything being wrong.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${NEREID_BIN:-target/debug/nereid}
pa=.tools/perf_analyzer/perf_analyzer.sh
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http=$(port); grpc=$(port); metrics=$(port)
# model_repository/ holds a Python model: its workers run on the venv (numpy).
"$bin" --model-repository model_repository --http-address 127.0.0.1 --grpc-address 127.0.0.1 \
  --backend-config=python,python-path="$PWD/.venv/bin/python" --metrics-address 127.0.0.1 --http-port "$http" --grpc-port "$grpc" --metrics-port "$metrics" \
  >"$work/nereid.log" 2>&1 &
pid=$!
# Up to 300 s: a debug build on a busy 2-core machine can take minutes to
# load the example models. Each check gives up after 10 s, so that a
# server that accepts but does not answer yet cannot hang the loop.
ready() { curl -sf --max-time 10 "http://127.0.0.1:$http/v2/health/ready" >/dev/null; }
deadline=$((SECONDS + 300))
until ready; do
  kill -0 $pid 2>/dev/null || { cat "$work/nereid.log"; exit 1; }
  [ $SECONDS -lt $deadline ] || { echo "nereid not ready after 300 s"; cat "$work/nereid.log"; exit 1; }
  sleep 0.1
done

failed=0
runs=0
for mem in none system; do
  shm_args=()
  [ $mem = system ] && shm_args=(--shared-memory system --output-shared-memory-size 1024)
  for proto in http grpc; do
    url=127.0.0.1:$http; [ $proto = grpc ] && url=127.0.0.1:$grpc
    csv=$work/$proto-$mem.csv
    runs=$((runs + 1))
    if timeout 300 "$pa" -m simple -i $proto -u "$url" "${shm_args[@]}" --concurrency-range 1 \
        --measurement-mode count_windows --measurement-request-count 200 -s 100 -r 10 \
        -f "$csv" >"$work/$proto-$mem.out" 2>&1; then
      count=$(awk -F, 'NR==2 {print $2}' "$csv")
      echo "perf_analyzer $proto (shared memory: $mem): $count infer/s"
      awk -F, 'NR==2 { exit !($2 > 0) }' "$csv" || { echo "perf_analyzer $proto ($mem) reported no throughput"; failed=$((failed + 1)); }
    else
      echo "perf_analyzer $proto ($mem) failed:"; cat "$work/$proto-$mem.out"; failed=$((failed + 1))
    fi
  done
done
if [ $failed = 0 ]; then echo "$runs passed, 0 failed"; else echo "perf smoke: $failed of $runs failed"; tail -20 "$work/nereid.log"; exit 1; fi
