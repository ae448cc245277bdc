"""The dynamic batcher behaves as Triton's (issue 9, checked against real
Triton 2.51 by tests/triton_ref/probe_scheduler.py with the same checks):
a batch that reaches a preferred size goes at once, a request's `timeout`
only ever shortens the queue policy's default, and a timeout that passed
before the batcher looked is rejected even on an idle model."""

from __future__ import annotations

import shutil

import pytest

from conftest import REPO_ROOT, start_server, stop_server
from scheduler_checks import (
    batching_configs,
    model_head,
    preferred_sizes_go_at_once,
    rejection,
    waves_go_as_one_batch,
)

HEAD = model_head('platform: "onnxruntime_onnx"')


@pytest.fixture(scope="module")
def parity_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scheduler")
    repo = tmp / "models"
    for name, config in batching_configs(HEAD).items():
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(REPO_ROOT / "model_repository/mlp/1/model.onnx", repo / name / "1")
        (repo / name / "config.pbtxt").write_text(config)
    server = start_server(tmp, [repo])
    yield server
    assert stop_server(server) == 0, server.log()


def test_batches_at_a_preferred_size_are_not_held_for_the_delay(parity_server):
    sizes = preferred_sizes_go_at_once(parity_server.http_url)
    assert set(sizes) <= {4, 8}, sizes
    assert sum(size * count for size, count in sizes.items()) == 25 * 4


def test_a_wave_that_reaches_a_preferred_size_runs_as_one_batch(parity_server):
    # Real Triton 2.51 runs each wave as one batch of four; the first
    # request of a wave must not go alone because the model was idle.
    assert waves_go_as_one_batch(parity_server.http_url) == {4: 3}


def test_a_longer_request_timeout_does_not_extend_the_default(parity_server):
    # The default is 1 µs: gone by the time the batcher looks, whatever
    # the request asks for.
    error = rejection(parity_server.http_url, "short_default_timeout", 10_000_000)
    assert error is not None and "Request timeout expired" in error, error


def test_a_timeout_already_passed_is_rejected_on_an_idle_model(parity_server):
    error = rejection(parity_server.http_url, "long_default_timeout", 1)
    assert error is not None and "Request timeout expired" in error, error
    # The same model serves requests whose timeout has not passed.
    assert rejection(parity_server.http_url, "long_default_timeout", 10_000_000) is None


def test_without_a_default_timeout_request_timeouts_are_ignored(parity_server):
    # Triton: an override can only shorten the default, and no default
    # (0) means no timeout at all.
    assert rejection(parity_server.http_url, "no_default_timeout", 1) is None
