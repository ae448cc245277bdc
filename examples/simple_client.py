"""Infer `simple` over HTTP with tritonclient, as a Triton user would.

    .venv/bin/python examples/simple_client.py [host:port]
"""

import sys

import numpy as np
import tritonclient.http as httpclient

url = sys.argv[1] if len(sys.argv) > 1 else "localhost:8000"
client = httpclient.InferenceServerClient(url)
a = np.arange(16, dtype=np.int32).reshape(1, 16)
b = np.ones((1, 16), dtype=np.int32)
inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
inputs[0].set_data_from_numpy(a)
inputs[1].set_data_from_numpy(b)
result = client.infer("simple", inputs)
print("OUTPUT0 (sum):       ", result.as_numpy("OUTPUT0"))
print("OUTPUT1 (difference):", result.as_numpy("OUTPUT1"))
