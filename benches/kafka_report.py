"""Writes the "Kafka" section of docs/benchmarks.md from what
benches/kafka.sh leaves: kafka_bench.py's JSON per partition count and
perf_analyzer's CSV per gRPC concurrency.

    kafka_report.py RESULTS OUT COUNT RATE SECONDS GIT TANSU_VERSION
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sections import write_section  # noqa: E402

BEGIN = "<!-- kafka:begin -->"
END = "<!-- kafka:end -->"


def grpc(results: Path, c: int):
    path = results / f"grpc-c{c}.csv"
    if not path.is_file():
        return None
    with path.open() as f:
        r = next(csv.DictReader(f))
    return float(r["Inferences/Second"]), float(r["p50 latency"]), float(r["p99 latency"])


def kafka(results: Path, partitions: int):
    path = results / f"kafka-p{partitions}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def fmt(value) -> str:
    return "–" if value is None else f"{value:,.0f}"


def main() -> None:
    results, out, count, rate, seconds, git, tansu = sys.argv[1:8]
    results = Path(results)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Kafka",
        "",
        f"Written by `benches/kafka.sh` on {now} (git `{git}`), on {os.cpu_count()} CPUs; "
        "rerun it to refresh. One run per row.",
        "",
        "nereid (release build) serves `model_repository/mlp` (256 FP32 in, 16 out, dynamic "
        f"batching) with `--kafka-config`: two `format = \"raw\"` routes, from a 1-partition and an "
        f"8-partition input topic, on {tansu or 'tansu'} (memory storage, loopback, same machine). "
        f"`benches/kafka_bench.py` (confluent-kafka) produces {int(count):,} records as fast as it can "
        "and counts answers read per second from the first produce to the last answer; then "
        f"{float(rate):,.0f} records/s for {float(seconds):,.0f} s, end to end from the produce call "
        "to the answer read. In the same run, over gRPC:",
        "",
        "```text",
        ".tools/perf_analyzer/perf_analyzer.sh -m mlp -i grpc -u 127.0.0.1:$PORT -b 1 "
        "--concurrency-range $C --measurement-mode count_windows --input-data zero "
        "--measurement-request-count 5000 -s 50 -r 5",
        "```",
        "",
        "| path | records/s (saturated) | p50 µs | p99 µs | latency measured at |",
        "|---|---:|---:|---:|---|",
    ]
    for partitions in (1, 8):
        k = kafka(results, partitions)
        if k is None:
            lines.append(f"| Kafka, {partitions} partition(s) | – | – | – | failed |")
            continue
        lines.append(f"| Kafka, {partitions} input partition(s) | {fmt(k['records_per_s'])} | "
                     f"{fmt(k['p50_us'])} | {fmt(k['p99_us'])} | {k['rate']:,.0f} records/s |")
    for c in (1, 8):
        g = grpc(results, c)
        if g is None:
            lines.append(f"| gRPC, concurrency {c} | – | – | – | failed |")
            continue
        lines.append(f"| gRPC, concurrency {c} | {fmt(g[0])} | {fmt(g[1])} | {fmt(g[2])} | "
                     "saturated (closed loop) |")
    k1, k8, g1, g8 = kafka(results, 1), kafka(results, 8), grpc(results, 1), grpc(results, 8)
    if k1 and k8 and g1 and g8:
        lines += ["", f"Ratios in this run: Kafka 8 partitions / 1 partition "
                  f"{k8['records_per_s'] / k1['records_per_s']:.2f}; Kafka 8 partitions / gRPC c8 "
                  f"{k8['records_per_s'] / g8[0]:.2f}; Kafka 1 partition / gRPC c1 "
                  f"{k1['records_per_s'] / g1[0]:.2f}."]
    lines.append("")
    write_section(Path(out), BEGIN, END, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
