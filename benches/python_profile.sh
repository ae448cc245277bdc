#!/usr/bin/env bash
# Where a Python model's request spends its time, on nereid: the worker
# tests' add_sub (as benches/python_backend.sh serves it) under
# perf_analyzer over gRPC and HTTP at c1 and c8, with
#  - each thread's CPU per inference (server threads by name, the worker's
#    main thread), from /proc/PID/task/TID/stat around each run;
#  - the worker's hottest Python lines (py-spy, when installed in .venv);
#  - the worker's request path timed in-process, step by step, without the
#    channel (benches/python_steps.py).
# Prints markdown for docs/benchmarks.md ("Python backend: where the
# microseconds go").
#
#   benches/python_profile.sh       # after `make setup-test` and a release build
#
# Environment: NEREID_BIN (target/release/nereid), PROFILE_REQUESTS (2000).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
nereid_bin=${NEREID_BIN:-target/release/nereid}
requests=${PROFILE_REQUESTS:-2000}
pa=$root/.tools/perf_analyzer/perf_analyzer.sh
readonly READY_TIMEOUT_S=120 PA_TIMEOUT_S=120 STOP_TIMEOUT_S=20
BENCH_TAG=python-profile
# shellcheck source=benches/lib.sh
source benches/lib.sh

bench_workdir python-profile
repo=$work/repo
mkdir -p "$repo/add_sub/1"
cp crates/nereid-backend-python/python/tests/models/add_sub/1/model.py "$repo/add_sub/1/"
cp benches/python_models/add_sub/config.pbtxt "$repo/add_sub/"

read -r http grpc metrics <<<"$(free_ports)"
"$nereid_bin" --model-repository "$repo" --http-port "$http" --grpc-port "$grpc" \
  --metrics-port "$metrics" --http-address 127.0.0.1 --grpc-address 127.0.0.1 \
  --metrics-address 127.0.0.1 --backend-config="python,python-path=$root/.venv/bin/python" \
  >"$work/nereid.log" 2>&1 &
pid=$!
trap 'stop_server "$pid"' EXIT
wait_ready "$pid" "http://127.0.0.1:$http/v2/health/ready" "$work/nereid.log" nereid
worker=$(pgrep -P "$pid" -f nereid_worker.py | head -n 1)

# "name ticks" for every thread of the server and the worker (the worker's
# threads named "worker: <name>").
thread_ticks() {
  local t
  for t in /proc/"$pid"/task/*; do
    printf '%s\t%s\n' "$(cat "$t/comm")" "$(sed 's/.*) //' "$t/stat" | awk '{ print $12 + $13 }')"
  done
  for t in /proc/"$worker"/task/*; do
    printf 'worker: %s\t%s\n' "$(cat "$t/comm")" "$(sed 's/.*) //' "$t/stat" | awk '{ print $12 + $13 }')"
  done
}

hz=$(getconf CLK_TCK)
echo "| protocol | concurrency | infer/s | p50 µs | thread | CPU µs/infer |"
echo "| --- | --- | ---: | ---: | --- | ---: |"
for protocol in grpc http; do
  port=$grpc
  [ "$protocol" = http ] && port=$http
  for c in 1 8; do
    thread_ticks >"$work/before.tsv"
    n0=$(inference_count "$http" add_sub)
    csv=$work/${protocol}_c$c.csv
    timeout "$PA_TIMEOUT_S" "$pa" -m add_sub -i "$protocol" -u "127.0.0.1:$port" -b 1 \
      --concurrency-range "$c" --measurement-mode count_windows \
      --measurement-request-count "$requests" -s 50 -r 5 -f "$csv" >"$csv.log" 2>&1 ||
      die "perf_analyzer failed: $(tail -n 2 "$csv.log")"
    n1=$(inference_count "$http" add_sub)
    thread_ticks >"$work/after.tsv"
    read -r rate p50 < <(awk -F, 'NR == 2 { printf "%.0f %d\n", $2, $10 }' "$csv")
    python3 - "$work/before.tsv" "$work/after.tsv" "$((n1 - n0))" "$hz" "$protocol" "c$c" "$rate" "$p50" <<'EOF'
import sys
from collections import defaultdict

def load(path):
    ticks = defaultdict(int)
    for line in open(path):
        name, value = line.rstrip("\n").split("\t")
        ticks[name] += int(value)
    return ticks

before, after = load(sys.argv[1]), load(sys.argv[2])
n, hz = int(sys.argv[3]), int(sys.argv[4])
rows = sorted(((after[k] - before.get(k, 0)) * 1e6 / hz / n, k) for k in after)
total = sum(us for us, _ in rows)
first = True
for us, name in reversed(rows):
    if us < 1:
        continue
    head = " | ".join(sys.argv[5:9]) if first else " |  |  | "
    print(f"| {head} | {name} | {us:,.0f} |")
    first = False
print(f"|  |  |  |  | **all** | **{total:,.0f}** |")
EOF
  done
done

if [ -x .venv/bin/py-spy ]; then
  echo
  echo "The worker's busiest lines over gRPC at c8 (py-spy, 4 s at 2,000 samples/s, samples in a blocking read of the doorbell left out):"
  echo
  timeout "$PA_TIMEOUT_S" "$pa" -m add_sub -i grpc -u "127.0.0.1:$grpc" -b 1 --concurrency-range 8 \
    --measurement-mode time_windows --measurement-interval 8000 -r 1 >"$work/spy_pa.log" 2>&1 &
  load=$!
  sleep 2
  .venv/bin/py-spy record -p "$worker" -r 2000 -d 4 -f raw -o "$work/worker.spy" --nonblocking >/dev/null 2>&1 || true
  wait "$load" || true
  python3 - "$work/worker.spy" <<'EOF'
import collections
import sys

own = collections.Counter()
total = 0
for line in open(sys.argv[1]):
    stack, n = line.rsplit(" ", 1)
    frame = stack.split(";")[-1]
    if "ChannelReader.fill" in frame:
        continue
    own[frame] += int(n)
    total += int(n)
print("| share of busy samples | line |")
print("| ---: | --- |")
for frame, n in own.most_common(12):
    print(f"| {n * 100 / total:.1f}% | `{frame}` |")
EOF
fi

echo
echo "The worker's request path in-process, per request (benches/python_steps.py):"
echo
.venv/bin/python benches/python_steps.py
