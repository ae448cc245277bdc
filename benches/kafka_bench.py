"""Kafka side of benches/kafka.sh: produces raw MLP inputs (256 FP32) to an
input topic, each with its produce time in a header, and reads the answers
from the output topic that nereid writes. Two measurements per topic:

- throughput: COUNT records produced as fast as the client can, records per
  second from the first produce to the last answer read;
- latency: records produced at RATE per second for SECONDS, end to end
  (produce time to the answer read) p50 and p99.

    kafka_bench.py BOOTSTRAP INPUT OUTPUT COUNT RATE SECONDS RESULT.json
"""

from __future__ import annotations

import json
import struct
import sys
import threading
import time
import uuid

import numpy as np
from confluent_kafka import Consumer, Producer

QUIET = {"log_level": 3}
VALUE = np.linspace(-1, 1, 256, dtype=np.float32).tobytes()


class Reader(threading.Thread):
    """Reads the output topic from its end, noting when each answer came."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                                  "auto.offset.reset": "latest", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 5, **QUIET})
        self.consumer.subscribe([topic])
        self.arrivals: dict[int, tuple[int, int]] = {}
        self.assigned = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            message = self.consumer.poll(0.05)
            if self.consumer.assignment():
                self.assigned.set()
            if message is None or message.error():
                continue
            now = time.time_ns()
            headers = dict(message.headers() or [])
            sent = struct.unpack("<q", headers["sent-ns"])[0]
            seq = int(message.key())
            self.arrivals.setdefault(seq, (sent, now))
        self.consumer.close()

    def wait_for(self, seqs: range, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(s in self.arrivals for s in seqs):
                return True
            time.sleep(0.02)
        return False


def produce(producer: Producer, topic: str, seqs: range, rate: float | None) -> None:
    start = time.monotonic()
    for n, seq in enumerate(seqs):
        if rate:
            delay = start + n / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        headers = [("sent-ns", struct.pack("<q", time.time_ns()))]
        while True:
            try:
                producer.produce(topic, key=str(seq), value=VALUE, headers=headers)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)


def main() -> None:
    bootstrap, input_topic, output_topic, count, rate, seconds, result = sys.argv[1:8]
    count, rate, seconds = int(count), float(rate), float(seconds)
    reader = Reader(bootstrap, output_topic)
    reader.start()
    # One record per batch: tansu 0.6.0 returns nothing for a fetch from
    # inside a batch, where nereid's consumer resumes after a pause.
    producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 1, "linger.ms": 0,
                         **QUIET})
    # Warm up: until an answer comes back, the reader is in place.
    warm = range(0, 50)
    deadline = time.monotonic() + 60
    while not reader.wait_for(warm, 2):
        produce(producer, input_topic, warm, None)
        if time.monotonic() > deadline:
            raise SystemExit("no answers from nereid")
    throughput = range(1000, 1000 + count)
    t0 = time.time_ns()
    produce(producer, input_topic, throughput, None)
    if not reader.wait_for(throughput, 300):
        raise SystemExit(f"{sum(s in reader.arrivals for s in throughput)} of {count} answers")
    t1 = max(reader.arrivals[s][1] for s in throughput)
    paced = range(1000 + count, 1000 + count + int(rate * seconds))
    produce(producer, input_topic, paced, rate)
    if not reader.wait_for(paced, 120):
        raise SystemExit("paced answers missing")
    latencies = np.array([(reader.arrivals[s][1] - reader.arrivals[s][0]) / 1e3 for s in paced])
    reader.stop.set()
    reader.join()
    out = {
        "count": count,
        "records_per_s": count / ((t1 - t0) / 1e9),
        "rate": rate,
        "paced": len(paced),
        "p50_us": float(np.percentile(latencies, 50)),
        "p99_us": float(np.percentile(latencies, 99)),
    }
    with open(result, "w") as f:
        json.dump(out, f)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
