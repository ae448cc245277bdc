"""Dynamic batcher behaviours checked the same way against Nereid (the
tests in test_scheduler_parity.py) and real Triton (tests/triton_ref/
probe_scheduler.py). Each check talks HTTP to a model whose input is FP32
[256] with a batch dimension; the configs are written by `batching_configs`."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

# Long enough that a batch held for the delay makes the client give up
# (CLIENT_TIMEOUT_S) instead of passing slowly; the client's bound is
# generous, as a request on a busy machine can be slow without being held.
HOLD_DELAY_US = 600_000_000
CLIENT_TIMEOUT_S = 120.0


def model_head(backend_line: str) -> str:
    """The part of every checked model's config.pbtxt before its
    `dynamic_batching` block, `{name}` standing for the model name."""
    return (
        'name: "{name}"\n'
        + backend_line
        + """
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 256 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
    )


def _dynamic(body: str) -> str:
    return "dynamic_batching {\n" + body + "\n}\n"


def batching_configs(head: str) -> dict[str, str]:
    """config.pbtxt text for each checked model, given the model's own
    `head` (platform or backend, max_batch_size 8, one instance, inputs and
    outputs) with `{name}` for the model name."""
    return {
        "preferred": head.replace("{name}", "preferred")
        + _dynamic(f"preferred_batch_size: [ 4, 8 ]\nmax_queue_delay_microseconds: {HOLD_DELAY_US}"),
        "wave": head.replace("{name}", "wave")
        + _dynamic(f"preferred_batch_size: [ 4 ]\nmax_queue_delay_microseconds: {HOLD_DELAY_US}"),
        "short_default_timeout": head.replace("{name}", "short_default_timeout")
        + _dynamic(
            "default_queue_policy { default_timeout_microseconds: 1 allow_timeout_override: true }"
        ),
        "no_default_timeout": head.replace("{name}", "no_default_timeout")
        + _dynamic("default_queue_policy { allow_timeout_override: true }"),
        "long_default_timeout": head.replace("{name}", "long_default_timeout")
        + _dynamic(
            "default_queue_policy { default_timeout_microseconds: 60000000 allow_timeout_override: true }"
        ),
    }


def _infer(url: str, model: str, rows: int, timeout_us: int | None = None):
    client = httpclient.InferenceServerClient(
        url, network_timeout=CLIENT_TIMEOUT_S, connection_timeout=CLIENT_TIMEOUT_S
    )
    try:
        inp = httpclient.InferInput("INPUT", [rows, 256], "FP32")
        inp.set_data_from_numpy(np.ones((rows, 256), np.float32))
        kwargs = {} if timeout_us is None else {"timeout": timeout_us}
        return client.infer(model, [inp], **kwargs)
    finally:
        client.close()


def batch_sizes(url: str, model: str) -> dict[int, int]:
    """Executions per batch size, from the model's statistics."""
    stats = requests.get(f"http://{url}/v2/models/{model}/stats", timeout=30).json()
    rows = stats["model_stats"][0]["batch_stats"]
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in rows}


def preferred_sizes_go_at_once(url: str, model: str = "preferred") -> dict[int, int]:
    """Eight clients each send three requests of four rows, then one more
    request of four rows follows the burst. Every batch reaches a preferred
    size (4 or 8), so none may wait for the (ten minute) queue delay: a
    held batch shows as a client timeout. Returns the batch sizes run."""

    def client(_: int) -> None:
        for _ in range(3):
            _infer(url, model, 4)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(client, range(8)))
    _infer(url, model, 4)
    return batch_sizes(url, model)


def waves_go_as_one_batch(url: str, model: str = "wave", waves: int = 3) -> dict[int, int]:
    """Waves of exactly four concurrent one-row requests on the idle model
    (preferred size 4, a ten-minute delay, one instance), one wave after
    another. Each wave reaches the preferred size, so it must run as one
    batch of four at once: a wave whose first request ran alone leaves
    three that wait out the delay, which shows as a client timeout.
    Returns the batch sizes run."""
    for _ in range(waves):
        start = threading.Barrier(4)

        def client(_: int) -> None:
            start.wait()
            _infer(url, model, 1)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(client, range(4)))
    return batch_sizes(url, model)


def rejection(url: str, model: str, timeout_us: int) -> str | None:
    """The error a request with queue timeout `timeout_us` gets on an idle
    model, or None when it runs."""
    try:
        _infer(url, model, 1, timeout_us=timeout_us)
    except InferenceServerException as e:
        return f"{e.status()}: {e.message()}"
    return None
