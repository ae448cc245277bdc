"""Infer `mlp` over gRPC with tritonclient.

    .venv/bin/python examples/grpc_client.py [host:port]
"""

import sys

import numpy as np
import tritonclient.grpc as grpcclient

url = sys.argv[1] if len(sys.argv) > 1 else "localhost:8001"
client = grpcclient.InferenceServerClient(url)
print("server ready:", client.is_server_ready())
x = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
inp.set_data_from_numpy(x)
result = client.infer("mlp", [inp])
print("class per row:", result.as_numpy("OUTPUT").argmax(axis=1))
