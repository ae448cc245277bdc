#!/usr/bin/env bash
# The language-model benchmark: Nereid's llamacpp backend against llama.cpp's
# own OpenAI-compatible server (llama-server, built by
# scripts/setup-llama-server.sh from the llama.cpp that PyPI's
# llama-cpp-python sdist vendors), on the same GGUF file
# (SmolLM2-135M-Instruct Q4_1), the same threads, one server at a time.
# llama-server runs as a user would start it for 16 concurrent clients with
# prompts of up to 1,000 tokens: `--parallel 16 --cont-batching -c 18432`,
# its context split into 16 slots of 1,152 positions (with `-c 4096`, 256
# a slot, most of these prompts are refused).
#
# Workloads (benches/llm_load.py), each request streamed with 128 tokens
# forced at temperature 0, closed loop:
#   mixed   prompts of 50 to 1,000 tokens at 1, 4, 16 and 64 streams;
#   shared  a 500-token system prompt every request shares, 16 streams;
#   long    a quarter of the prompts about 2,000 tokens, 16 streams;
#   tight   (Nereid only) mixed at 64 streams with a KV cache of a quarter
#           of what 64 such streams need.
# Measures generated tokens/s, time to first token p50/p99, time per output
# token p50, failures, and the server's peak RSS; for Nereid the prefix
# cache's hit rate. Writes the "Language models" section of
# docs/benchmarks.md (benches/llm_report.py).
#
#   benches/llm.sh          # after a release build
#
# Environment: LLM_THREADS (2), LLM_CONCURRENCIES ("1 4 16 64"), NEREID_BIN,
# BENCH_OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_TAG=llm
# shellcheck source=benches/lib.sh
source benches/lib.sh
threads=${LLM_THREADS:-2}
read -r -a concurrencies <<<"${LLM_CONCURRENCIES:-1 4 16 64}"
nereid_bin=${NEREID_BIN:-target/release/nereid}
out=${BENCH_OUT:-docs/benchmarks.md}
readonly STOP_TIMEOUT_S=20

bench_workdir llm
scripts/setup-python.sh
gguf=$(scripts/setup-llm.sh)
llama_server=$(scripts/setup-llama-server.sh)
[ -x "$nereid_bin" ] || cargo build --release --bin nereid
python=.venv/bin/python
results=$work/results.jsonl
: >"$results"

# Writes a repository serving the GGUF as `smollm2` with a KV cache of $1.
repository() {
  local repo=$work/repo-$1
  rm -rf "$repo" && mkdir -p "$repo/smollm2/1"
  ln -f "$gguf" "$repo/smollm2/1/model.gguf" 2>/dev/null || cp "$gguf" "$repo/smollm2/1/model.gguf"
  sed -e '/^parameters/d' model_repository/smollm2/config.pbtxt >"$repo/smollm2/config.pbtxt"
  cat >>"$repo/smollm2/config.pbtxt" <<CONFIG
parameters { key: "kv_cache_tokens" value: { string_value: "$1" } }
parameters { key: "max_sequences" value: { string_value: "64" } }
parameters { key: "threads" value: { string_value: "$threads" } }
CONFIG
  echo "$repo"
}

# Peak RSS (kB) of a process, from /proc.
peak_rss() { awk '/VmHWM/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

wait_ready() {
  local url=$1 i
  for ((i = 0; i < 600; i++)); do
    curl -sf "$url" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  die "no answer from $url"
}

# load SERVER LABEL URL CONCURRENCY REQUESTS WORKLOAD PID
load() {
  local server=$1 label=$2 url=$3 c=$4 n=$5 workload=$6 pid=$7 line
  log "$server $label: $c streams, $n requests ($workload)"
  line=$("$python" benches/llm_load.py --url "$url" --concurrency "$c" --requests "$n" \
    --workload "$workload")
  echo "{\"server\": \"$server\", \"label\": \"$label\", \"peak_rss_kb\": $(peak_rss "$pid"), \"result\": $line}" >>"$results"
}

requests_for() { if [ "$1" -ge 16 ]; then echo "$1"; else echo $((2 * $1 + 2)); fi; }

run_nereid() {
  local kv=$1 label=$2 workloads=$3 repo http grpc metrics openai c
  repo=$(repository "$kv")
  read -r http grpc metrics openai <<<"$(free_ports 4)"
  "$nereid_bin" --model-repository "$repo" --http-port "$http" --grpc-port "$grpc" \
    --metrics-port "$metrics" --openai-port "$openai" --http-address 127.0.0.1 \
    --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 >"$work/nereid-$label.log" 2>&1 &
  pid=$!
  wait_ready "http://127.0.0.1:$http/v2/models/smollm2/ready"
  for workload in $workloads; do
    case $workload in
      mixed) for c in "${concurrencies[@]}"; do
          load nereid "$label" "http://127.0.0.1:$openai/v1" "$c" "$(requests_for "$c")" mixed "$pid"
        done ;;
      tight) load nereid "$label" "http://127.0.0.1:$openai/v1" 64 64 mixed "$pid" ;;
      *) load nereid "$label" "http://127.0.0.1:$openai/v1" 16 32 "$workload" "$pid" ;;
    esac
  done
  curl -s "http://127.0.0.1:$metrics/metrics" | grep -E '^(vllm|llm):' >"$work/metrics-$label.txt" || true
  stop_server "$pid"
}

run_llama_server() {
  local port c
  port=$(free_ports 1)
  "$llama_server" -m "$gguf" --host 127.0.0.1 --port "$port" -t "$threads" -tb "$threads" \
    -c 18432 --parallel 16 --cont-batching >"$work/llama-server.log" 2>&1 &
  pid=$!
  wait_ready "http://127.0.0.1:$port/health"
  for c in "${concurrencies[@]}"; do
    load llama-server default "http://127.0.0.1:$port/v1" "$c" "$(requests_for "$c")" mixed "$pid"
  done
  load llama-server default "http://127.0.0.1:$port/v1" 16 32 shared "$pid"
  load llama-server default "http://127.0.0.1:$port/v1" 16 32 long "$pid"
  stop_server "$pid"
}

busy=$(background_busy_pct)
run_llama_server
# 64 streams of the mixed prompts hold about 64 * 650 = 41,600 positions at
# once; the default run gives the cache 24,576 (preempting some at 64
# streams), the tight one a quarter of that need.
run_nereid 24576 default "mixed shared long"
run_nereid 10496 tight "tight"
"$python" benches/llm_report.py "$results" "$work" "$busy" "$threads" "$out"
log "wrote $out"
