"""Calls the tests make through the real clients: one inference over any
protocol (HTTP JSON, HTTP binary, gRPC), and the repository, stats and
readiness endpoints."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

TIMEOUT_S = 30

PROTOCOLS = ["http-json", "http-binary", "grpc"]


def infer(server, protocol: str, model: str, inputs: list[tuple[str, np.ndarray, str]],
          outputs: list[str] | None = None, request_id: str = "") -> SimpleNamespace:
    """One inference: the names answered (repeats included), the outputs by name
    and the id answered."""
    if protocol.startswith("http"):
        binary = protocol == "http-binary"
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=TIMEOUT_S,
                                                  connection_timeout=TIMEOUT_S)
        tensors = []
        for name, array, datatype in inputs:
            t = httpclient.InferInput(name, list(array.shape), datatype)
            t.set_data_from_numpy(array, binary_data=binary)
            tensors.append(t)
        wanted = [httpclient.InferRequestedOutput(o, binary_data=binary) for o in outputs or []]
        try:
            result = client.infer(model, tensors, outputs=wanted or None, request_id=request_id)
        finally:
            client.close()
        response = result.get_response()
        names, answered_id = [o["name"] for o in response["outputs"]], response.get("id", "")
    else:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        tensors = []
        for name, array, datatype in inputs:
            t = grpcclient.InferInput(name, list(array.shape), datatype)
            t.set_data_from_numpy(array)
            tensors.append(t)
        wanted = [grpcclient.InferRequestedOutput(o) for o in outputs or []]
        try:
            result = client.infer(model, tensors, outputs=wanted or None, request_id=request_id,
                                  client_timeout=TIMEOUT_S)
        finally:
            client.close()
        response = result.get_response()
        names, answered_id = [o.name for o in response.outputs], response.id
    return SimpleNamespace(names=names, outputs={n: result.as_numpy(n) for n in names}, id=answered_id)


def index(server) -> dict[str, dict]:
    rows = requests.post(f"{server.base}/v2/repository/index", json={}).json()
    return {r["name"]: r for r in rows}


def model_stats(server, model: str) -> dict:
    r = requests.get(f"{server.base}/v2/models/{model}/stats")
    r.raise_for_status()
    return r.json()["model_stats"][0]


def ready(server, model: str) -> bool:
    return requests.get(f"{server.base}/v2/models/{model}/ready", timeout=TIMEOUT_S).status_code == 200


