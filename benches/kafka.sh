#!/usr/bin/env bash
# Kafka against gRPC on the same model: nereid (release build) serves the
# example MLP (model_repository/mlp) with a Kafka route file of two routes,
# one from a 1-partition input topic and one from an 8-partition topic (raw
# 256-FP32 records), on a tansu broker of the script's own (memory storage,
# loopback). benches/kafka_bench.py produces and reads with confluent-kafka:
# records per second with the input produced as fast as it goes, and end-to-
# end p50/p99 (produce time to the answer read) at a paced rate. In the same
# run, perf_analyzer 2.51 sends the MLP the same kind of input over gRPC at
# concurrency 1 and 8. Writes the "Kafka" section of docs/benchmarks.md
# (benches/kafka_report.py).
#
#   benches/kafka.sh            # after a release build
#
# Environment: KAFKA_COUNT (records per throughput run, 20000), KAFKA_RATE
# (paced records per second, 500), KAFKA_SECONDS (paced run, 10),
# NEREID_BIN, BENCH_OUT (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${KAFKA_COUNT:-20000}
rate=${KAFKA_RATE:-500}
seconds=${KAFKA_SECONDS:-10}
nereid_bin=${NEREID_BIN:-target/release/nereid}
out=${BENCH_OUT:-docs/benchmarks.md}
pa=$PWD/.tools/perf_analyzer/perf_analyzer.sh
readonly READY_TIMEOUT_S=60 PA_TIMEOUT_S=180 STOP_TIMEOUT_S=30
BENCH_TAG=kafka
# shellcheck source=benches/lib.sh
source benches/lib.sh

bench_workdir kafka
tansu_pid=
trap 'stop_server "$tansu_pid"; bench_cleanup' EXIT

scripts/setup-python.sh
scripts/setup-perf-analyzer.sh
tansu=$(scripts/setup-tansu.sh)
export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$(scripts/ort-path.sh)}
[ -x "$nereid_bin" ] || cargo build --release --bin nereid
mkdir -p "$work/results" "$work/tansu" "$work/repo"
cp -r model_repository/mlp "$work/repo/"

read -r kafka_port http grpc metrics <<<"$(free_ports 4)"
bootstrap=127.0.0.1:$kafka_port
(cd "$work/tansu" && env -u STORAGE_ENGINE -u LISTENER_URL -u ADVERTISED_LISTENER_URL RUST_LOG=warn \
  "$tansu" broker --kafka-cluster-id bench --listener-url "tcp://$bootstrap" \
  --advertised-listener-url "tcp://$bootstrap" --storage-engine memory://tansu/ \
  >"$work/tansu.log" 2>&1) &
tansu_pid=$!
.venv/bin/python - "$bootstrap" <<'PY'
import sys, time
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
admin = AdminClient({"bootstrap.servers": sys.argv[1], "log_level": 3})
for _ in range(300):
    try:
        admin.list_topics(timeout=1)
        break
    except KafkaException:
        time.sleep(0.1)
topics = [NewTopic(n, num_partitions=p, replication_factor=1) for n, p in
          [("mlp-in-1", 1), ("mlp-out-1", 1), ("mlp-in-8", 8), ("mlp-out-8", 8), ("dead-letters", 1)]]
for f in admin.create_topics(topics).values():
    f.result(30)
PY

cat >"$work/kafka.toml" <<TOML
brokers = "$bootstrap"
group_id = "bench"
dead_letter_topic = "dead-letters"
# With librdkafka's default fetch.wait.max.ms (500 ms), tansu answered the
# resumed partitions' fetches slowly: 79 records/s on one partition against
# 1,946 with 5 ms in the same setup.
[consumer]
"fetch.wait.max.ms" = "5"
[[routes]]
input_topic = "mlp-in-1"
model = "mlp"
output_topic = "mlp-out-1"
format = "raw"
[[routes]]
input_topic = "mlp-in-8"
model = "mlp"
output_topic = "mlp-out-8"
format = "raw"
TOML

"$nereid_bin" --model-repository "$work/repo" --http-port "$http" --grpc-port "$grpc" \
  --metrics-port "$metrics" --http-address 127.0.0.1 --grpc-address 127.0.0.1 \
  --metrics-address 127.0.0.1 --kafka-config "$work/kafka.toml" >"$work/nereid.log" 2>&1 &
pid=$!
wait_ready "$pid" "http://127.0.0.1:$http/v2/health/ready" "$work/nereid.log" "nereid (Kafka joined)"

for partitions in 1 8; do
  log "Kafka, $partitions input partition(s): $count records, then $rate/s for ${seconds}s"
  .venv/bin/python benches/kafka_bench.py "$bootstrap" "mlp-in-$partitions" "mlp-out-$partitions" \
    "$count" "$rate" "$seconds" "$work/results/kafka-p$partitions.json" >&2
done

for c in 1 8; do
  csv=$work/results/grpc-c$c.csv
  if timeout "$PA_TIMEOUT_S" "$pa" -m mlp -i grpc -u "127.0.0.1:$grpc" -b 1 \
    --concurrency-range "$c" --measurement-mode count_windows --input-data zero \
    --measurement-request-count 5000 -s 50 -r 5 -f "$csv" >"$csv.log" 2>&1; then
    log "gRPC c$c: $(awk -F, 'NR == 2 { printf "%.0f infer/s", $2 }' "$csv")"
  else
    log "gRPC c$c: perf_analyzer failed: $(tail -n 2 "$csv.log" | tr '\n' ' ')"
    rm -f "$csv"
  fi
done
curl -sf "http://127.0.0.1:$metrics/metrics" | grep '^nereid_kafka_records' >"$work/results/metrics.txt" || true
stop_server "$pid"
pid=

.venv/bin/python benches/kafka_report.py "$work/results" "$out" "$count" "$rate" "$seconds" \
  "$(git rev-parse --short=12 HEAD)" "$("$tansu" --version 2>/dev/null | head -n 1)"
log "wrote the Kafka section of $out"
