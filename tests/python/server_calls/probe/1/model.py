"""Runs the Python code each request sends (CMD) in a namespace kept for
the instance's life, and answers with repr(result), or the exception it
raised as "EXC <type>: <message>". The tests drive the custom
metrics and model control calls through it, the same code on Nereid and
on real Triton (which needs the PYTHONPATH lines below to find numpy)."""

import os
import sys

for _p in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
    if _p and _p not in sys.path:
        sys.path.insert(0, _p)

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        self.namespace = {"pb_utils": pb_utils, "np": np, "args": args}

    def run(self, code):
        self.namespace["result"] = None
        try:
            exec(code, self.namespace)
            return repr(self.namespace["result"])
        except BaseException as error:
            return f"EXC {type(error).__name__}: {error}"

    def execute(self, requests):
        responses = []
        for request in requests:
            code = pb_utils.get_input_tensor_by_name(request, "CMD").as_numpy()[0].decode()
            out = np.array([self.run(code).encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
