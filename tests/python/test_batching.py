"""Dynamic batching end to end: many concurrent clients on the batching
MLP get exactly the unbatched answers, while the statistics show requests
sharing executions."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import REPO_ROOT, start_server, stop_server
from models import mlp_reference, sample

CLIENTS = 64
REQUESTS_PER_CLIENT = 4


@pytest.fixture(scope="module")
def batching_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batching")
    repo = tmp / "models"
    shutil.copytree(REPO_ROOT / "model_repository" / "mlp", repo / "mlp")
    (repo / "mlp" / "config.pbtxt").write_text(
        (repo / "mlp" / "config.pbtxt").read_text()
        + 'instance_group [ { kind: KIND_CPU count: 1 } ]\n'
    )
    server = start_server(tmp, [repo])
    yield server
    assert stop_server(server) == 0, server.log()


def stats(server):
    return requests.get(f"{server.base}/v2/models/mlp/stats").json()["model_stats"][0]


def test_concurrent_clients_get_unbatched_answers(batching_server):
    x = sample(np.float32, (CLIENTS * REQUESTS_PER_CLIENT, 256), seed=21)
    expected = mlp_reference(x)
    before = stats(batching_server)

    def client(worker: int) -> list[tuple[int, np.ndarray]]:
        answers = []
        if worker % 2:
            c = httpclient.InferenceServerClient(batching_server.http_url)
            make = httpclient.InferInput
        else:
            c = grpcclient.InferenceServerClient(batching_server.grpc_url)
            make = grpcclient.InferInput
        for k in range(REQUESTS_PER_CLIENT):
            row = worker * REQUESTS_PER_CLIENT + k
            inp = make("INPUT", [1, 256], "FP32")
            inp.set_data_from_numpy(x[row : row + 1])
            answers.append((row, c.infer("mlp", [inp]).as_numpy("OUTPUT")[0]))
        c.close()
        return answers

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = [a for answers in pool.map(client, range(CLIENTS)) for a in answers]
    assert len(results) == CLIENTS * REQUESTS_PER_CLIENT
    for row, got in results:
        np.testing.assert_allclose(got, expected[row], rtol=1e-5, atol=1e-5)

    after = stats(batching_server)
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == CLIENTS * REQUESTS_PER_CLIENT
    assert executions < inferences, f"{executions} executions for {inferences} inferences"
    assert any(b["batch_size"] > 1 for b in after["batch_stats"]), after["batch_stats"]


def test_config_shows_the_batcher(batching_server):
    config = requests.get(f"{batching_server.base}/v2/models/mlp/config").json()
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 2000
