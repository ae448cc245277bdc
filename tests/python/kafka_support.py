"""A tansu Kafka-protocol broker on a free loopback port, and the user's side
of a pipeline: topics made through the admin API, records produced and
read back with confluent-kafka (librdkafka), as a user's code would. The
broker comes from $TANSU_BIN or .tools/tansu/bin/tansu
(scripts/setup-tansu.sh builds it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import requests
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import REPO_ROOT, Server, free_port, start_server

QUIET = {"log_level": 3}
# The consumer group's session timeout in the route files made here.
SESSION_TIMEOUT_S = 6


def tansu_binary() -> str:
    return os.environ.get("TANSU_BIN", str(REPO_ROOT / ".tools/tansu/bin/tansu"))


class Tansu:
    """One tansu broker; `storage` is memory://tansu/ or sqlite://FILE
    (durable across `stop` and `start`)."""

    def __init__(self, tmp: Path, durable: bool = False):
        self.tmp = tmp
        self.port = free_port()
        self.storage = "sqlite://tansu.db" if durable else "memory://tansu/"
        self.process: subprocess.Popen | None = None
        self.log_path = tmp / "tansu.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items()
               if k not in ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE")}
        env.setdefault("RUST_LOG", "warn")
        log = open(self.log_path, "a")
        # Its own folder: tansu reads a .env from where it starts.
        self.process = subprocess.Popen(
            [tansu_binary(), "broker", "--kafka-cluster-id", "nereid-tests",
             "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", self.storage],
            cwd=self.tmp, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.process.returncode}:\n{self.log()}")
            try:
                AdminClient({"bootstrap.servers": self.bootstrap, **QUIET}).list_topics(timeout=1)
                return
            except KafkaException:
                time.sleep(0.1)
        raise RuntimeError(f"tansu did not answer:\n{self.log()}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def create_topics(self, partitions: dict[str, int]) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in partitions.items()])
        for future in futures.values():
            future.result(timeout=120)


def produce(bootstrap: str, topic: str, records: list[dict], batched: bool = False) -> None:
    """Produces each record (`value`, and optionally `key`, `headers`,
    `partition`) and waits for every acknowledgement.

    One record per batch unless `batched`: tansu 0.6.0 answers a fetch from
    an offset inside a record batch with the next batch, or with nothing
    when it is the last (Kafka sends the whole batch and the client skips
    what it already has). Nereid reads such partitions again from before
    (docs/streaming.md); the test readers here do not, and some tests
    read from inside a topic. `batched`: librdkafka's own batching, as
    docs/streaming.md's producer does (many records a batch)."""
    batching = {} if batched else {"batch.num.messages": 1, "linger.ms": 0}
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         **batching, **QUIET})
    failures = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(err)

    for record in records:
        extra = {k: record[k] for k in ("key", "headers", "partition") if k in record}
        producer.produce(topic, value=record["value"], on_delivery=delivered, **extra)
        producer.poll(0)
    assert producer.flush(120) == 0, "records left unsent"
    assert not failures, failures


@dataclass
class Read:
    """Records read from a topic, and how many times each key came.
    Counted as they come: a reader's stop condition runs after every
    record, and recounting thousands each time made the reader itself
    the bottleneck (a read of 3,000 answers then took minutes)."""
    messages: list = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)

    def add(self, message) -> None:
        self.messages.append(message)
        self.counts[message.key().decode() if message.key() is not None else None] += 1

    def keys(self) -> Counter:
        return self.counts


def read(bootstrap: str, topic: str, until, timeout: float = 60, group: str | None = None) -> Read:
    """Reads `topic` from the start (a new group) until `until(read)` holds
    or `timeout` passes; returns what it read."""
    consumer = Consumer({"bootstrap.servers": bootstrap,
                         "group.id": group or f"reader-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})
    consumer.subscribe([topic])
    result = Read()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not until(result):
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            result.add(message)
    finally:
        consumer.close()
    return result


def record_count(bootstrap: str, topic: str, partitions: int) -> int:
    """How many records `topic` holds now, from its partitions' low and
    high watermarks: exact at once, where reading it all back takes a
    consumer's join and fetches."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"counter-{uuid.uuid4()}",
                         **QUIET})
    try:
        marks = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                 for p in range(partitions)]
        return sum(high - low for low, high in marks)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offset of each partition (-1001: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        offsets = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return [tp.offset for tp in offsets]
    finally:
        consumer.close()


def simple_record(i: int) -> dict:
    """A KServe JSON record for model_repository/simple numbered `i`: its
    key and id say which; OUTPUT0 is INPUT0 + INPUT1 = 16 times i + 1."""
    body = {"id": f"req-{i}",
            "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [i] * 16},
                       {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]}
    return {"key": str(i), "value": json.dumps(body).encode()}


def config_text(broker: Tansu, group: str, routes: list[dict], producer: dict | None = None,
                **top) -> str:
    """A route file: the broker and group, `top` fields, producer settings
    beside the tests' own, then each route."""
    lines = [f'brokers = "{broker.bootstrap}"', f'group_id = "{group}"',
             'dead_letter_topic = "dead-letters"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in top.items()]
    # fetch.wait.max.ms: with librdkafka's 500 ms, tansu served a consumer
    # that pauses and resumes partitions about 20 times slower.
    lines += ["[consumer]", f'"session.timeout.ms" = "{SESSION_TIMEOUT_S * 1000}"', '"heartbeat.interval.ms" = "500"',
              '"fetch.wait.max.ms" = "5"']
    # One record per batch in the answers too (see `produce`): the readers
    # here resume inside the output topics.
    lines += ["[producer]", '"batch.num.messages" = "1"']
    lines += [f'"{k}" = "{v}"' for k, v in (producer or {}).items()]
    for route in routes:
        lines.append("[[routes]]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in route.items()]
    return "\n".join(lines) + "\n"


def start_nereid(tmp: Path, config: str, name: str = "nereid", wait_ready: bool = True,
                 extra: list[str] | None = None, repositories: list[Path] | None = None) -> Server:
    """Starts nereid with the route file `config` over the project's model
    repositories and `repositories`; waits for readiness (the consumer
    joined and the models ready) unless told not to."""
    folder = tmp / name
    folder.mkdir(exist_ok=True)
    path = folder / "kafka.toml"
    path.write_text(config)
    args = [f"--kafka-config={path}", "--exit-timeout-secs=20", *(extra or [])]
    repositories = [REPO_ROOT / "model_repository", REPO_ROOT / "tests" / "models",
                    *(repositories or [])]
    ready = plain_ready if wait_ready else live
    return start_server(folder, repositories, args, ready=ready)


def plain_ready(server: Server) -> bool:
    return requests.get(f"{server.base}/v2/health/ready", timeout=10).status_code == 200


def live(server: Server) -> bool:
    return requests.get(f"{server.base}/v2/health/live", timeout=10).status_code == 200


def is_ready(server: Server) -> bool:
    try:
        return plain_ready(server)
    except requests.RequestException:
        return False


def wait_for(condition, timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def metric_values(server: Server) -> dict[str, float]:
    """Every `nereid_kafka_*` series of the metrics endpoint, by its line's
    name and labels."""
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=30).text
    values = {}
    for line in text.splitlines():
        if line.startswith("nereid_kafka_"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values
