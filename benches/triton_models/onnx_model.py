"""Runs one of nereid's ONNX files through onnxruntime inside Triton's Python
backend, so real Triton 2.51 (whose pytriton build has no ONNX Runtime
backend) serves the same graph as nereid. Each `<model>/1/model.py` (the file
the backend loads) imports the class from here.

The ONNX file is model_repository/<model>/1/model.onnx of the nereid checkout,
found from this file's location (benches/triton_models/) or from
$NEREID_ONNX_REPOSITORY.
"""

import os
import sys

# The python backend stub embeds the interpreter in isolated mode, so it
# ignores PYTHONPATH; scripts/run-triton.sh puts the triton venv's
# site-packages there (numpy<2 and onnxruntime live in it).
for _p in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
    if _p and _p not in sys.path:
        sys.path.insert(0, _p)

import json  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402


def _onnx_path(model_name):
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "..", "model_repository")
    repo = os.environ.get("NEREID_ONNX_REPOSITORY", default)
    return os.path.normpath(os.path.join(repo, model_name, "1", "model.onnx"))


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        path = _onnx_path(args["model_name"])
        # ONNX Runtime's defaults (all graph optimizations, its own thread
        # count), as nereid uses for a config without parameters.
        self.session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests):
        # With dynamic_batching, the backend hands over several requests in
        # one call: their inputs are concatenated along the batch dimension,
        # run through ONNX Runtime once, and the outputs split back by each
        # request's batch size, as Triton's own ONNX Runtime backend does.
        feeds = [
            {name: pb_utils.get_input_tensor_by_name(r, name).as_numpy() for name in self.inputs}
            for r in requests
        ]
        if len(feeds) == 1:
            batch = feeds[0]
        else:
            batch = {name: np.concatenate([f[name] for f in feeds]) for name in self.inputs}
        results = self.session.run(self.outputs, batch)
        responses, start = [], 0
        for feed in feeds:
            rows = len(next(iter(feed.values())))
            tensors = [pb_utils.Tensor(n, r[start:start + rows])
                       for n, r in zip(self.outputs, results)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start += rows
        return responses
