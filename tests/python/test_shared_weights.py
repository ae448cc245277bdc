"""The CPU instances of an ONNX model hold its weights once: a server with
`count: 4` of a ~100 MB model is about as large as one with `count: 3`
(before sharing, each instance added its own copy, as in Triton:
onnxruntime_backend#18). The model is made here, too big to commit."""

from __future__ import annotations

import importlib.util
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient

from conftest import REPO_ROOT, start_server, stop_server

# 256 -> 4096 -> 4096 -> 2048 -> 16: 105 MB (100 MiB) of fp32 weights.
SIZES = (256, 4096, 4096, 2048, 16)
WEIGHT_BYTES = 4 * sum(i * o + o for i, o in zip(SIZES, SIZES[1:]))
# The fourth instance may add this share of the weights; it adds about 3%
# (its own activations), where a copy of the weights adds 100%.
MAX_FOURTH_SHARE = 0.25


def make_models():
    spec = importlib.util.spec_from_file_location("make_models", REPO_ROOT / "scripts/make_models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("weights") / "model.onnx"
    path.write_bytes(make_models().mlp_model("weights", SIZES).SerializeToString())
    return path


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def serve_and_measure(tmp_path, model_file, count: int) -> float:
    """The server's RSS with `count` instances of the model, after each
    instance has run batches (concurrent clients keep all of them busy)."""
    mm = make_models()
    repo = tmp_path / f"count{count}"
    inputs, outputs = mm.mlp_io(SIZES)
    extra = f"instance_group [ {{ kind: KIND_CPU count: {count} }} ]\n"
    (repo / "weights" / "1").mkdir(parents=True)
    (repo / "weights" / "config.pbtxt").write_text(mm.config_text("weights", 8, inputs, outputs, extra))
    os.link(model_file, repo / "weights" / "1" / "model.onnx")
    server = start_server(tmp_path / f"log{count}", [repo])
    try:
        x = np.random.default_rng(0).standard_normal((8, 256)).astype(np.float32)

        def infer(_):
            client = httpclient.InferenceServerClient(server.http_url)
            tensor = httpclient.InferInput("INPUT", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            for _ in range(5):
                out = client.infer("weights", [tensor]).as_numpy("OUTPUT")
                assert out.shape == (8, 16) and np.isfinite(out).all()

        with ThreadPoolExecutor(2 * count) as pool:
            list(pool.map(infer, range(2 * count)))
        return rss_mib(server.process.pid)
    finally:
        assert stop_server(server) == 0, server.log()


def test_a_fourth_instance_adds_no_copy_of_the_weights(tmp_path, model_file):
    for count in (3, 4):
        (tmp_path / f"log{count}").mkdir()
    three = serve_and_measure(tmp_path, model_file, 3)
    four = serve_and_measure(tmp_path, model_file, 4)
    weights_mib = WEIGHT_BYTES / 2**20
    added = four - three
    assert added < MAX_FOURTH_SHARE * weights_mib, (
        f"count 3: {three:.0f} MiB, count 4: {four:.0f} MiB: the fourth instance "
        f"added {added:.0f} MiB, {added / weights_mib:.0%} of the {weights_mib:.0f} MiB of weights"
    )
