#!/usr/bin/env bash
# The decoupled streaming benchmark: a decoupled Python model that streams
# 100 responses per request (benches/decoupled_models/stream_n, the same
# model.py on both servers), at 1 and 16 concurrent gRPC streams, on nereid
# and, in the same run, on real Triton 2.51 with its Python backend.
# Measures time to first response, responses per second and the servers'
# CPU per response (their whole process trees: the Python workers and
# stubs included). Writes the "Decoupled streaming" section of
# docs/benchmarks.md (benches/decoupled_report.py).
#
#   benches/decoupled.sh     # after a release build
#
# With STREAM_MODEL=stream_paced (benches/decoupled_models/stream_paced:
# one instance, execute returns at once and a thread per request sends the
# responses 10 ms apart) it writes the "Paced streams on one instance"
# section instead; `make bench` runs both:
#
#   STREAM_MODEL=stream_paced STREAM_REQUESTS=5 benches/decoupled.sh
#
# Environment: STREAM_MODEL (stream_n), STREAM_CONCURRENCIES ("1 16"),
# STREAM_RESPONSES (100), STREAM_REQUESTS (requests per stream, 20),
# NEREID_BIN, BENCH_OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
model=${STREAM_MODEL:-stream_n}
BENCH_TAG=decoupled-$model
# shellcheck source=benches/lib.sh
source benches/lib.sh
read -r -a concurrencies <<<"${STREAM_CONCURRENCIES:-1 16}"
responses=${STREAM_RESPONSES:-100}
requests=${STREAM_REQUESTS:-20}
nereid_bin=${NEREID_BIN:-target/release/nereid}
out=${BENCH_OUT:-docs/benchmarks.md}
readonly READY_TIMEOUT_S=180 CLIENT_TIMEOUT_S=600 STOP_TIMEOUT_S=20

bench_workdir decoupled
scripts/setup-python.sh
scripts/setup-triton.sh
[ -x "$nereid_bin" ] || cargo build --release --bin nereid
mkdir -p "$work/repo"
cp -r "benches/decoupled_models/$model" "$work/repo/"
mkdir -p "$work/results"

for server in nereid triton; do
  read -r http grpc metrics <<<"$(free_ports)"
  case $server in
    nereid)
      "$nereid_bin" --model-repository "$work/repo" --http-port "$http" --grpc-port "$grpc" \
        --metrics-port "$metrics" --http-address 127.0.0.1 --grpc-address 127.0.0.1 \
        --metrics-address 127.0.0.1 --backend-config="python,python-path=$root/.venv/bin/python" \
        >"$work/$server.log" 2>&1 &
      ;;
    triton)
      TRITON_HTTP_PORT=$http TRITON_GRPC_PORT=$grpc TRITON_METRICS_PORT=$metrics \
        scripts/run-triton.sh "$work/repo" >"$work/$server.log" 2>&1 &
      ;;
  esac
  pid=$!
  wait_ready "$pid" "http://127.0.0.1:$http/v2/health/ready" "$work/$server.log" "$server"
  for c in "${concurrencies[@]}"; do
    name=${server}_c$c
    before=$(tree_ticks "$pid")
    if timeout "$CLIENT_TIMEOUT_S" .venv/bin/python benches/decoupled_client.py \
      "127.0.0.1:$grpc" "$model" "$responses" "$c" "$requests" >"$work/results/$name.json" \
      2>"$work/results/$name.log"; then
      after=$(tree_ticks "$pid")
      python3 - "$work/results/$name.json" "$((after - before))" "$(getconf CLK_TCK)" "$responses" <<'PY'
import json, sys
path, ticks, hz, responses = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
result = json.load(open(path))
# The warm-up's two requests ran between the two tick readings too.
sent = (result["requests"] + 2) * responses
result["cpu_us_per_response"] = round(ticks * 1e6 / hz / sent, 1)
json.dump(result, open(path, "w"))
PY
      log "$name: $(cat "$work/results/$name.json")"
    else
      log "$name: the client failed: $(tail -n 2 "$work/results/$name.log" | tr '\n' ' ')"
      rm -f "$work/results/$name.json"
    fi
  done
  stop_server "$pid"
  pid=
done

.venv/bin/python benches/decoupled_report.py "$work/results" "$out" "$responses" "$requests" \
  "$(git rev-parse --short=12 HEAD)" "${concurrencies[*]}" "$model"
log "wrote the $model section of $out"
