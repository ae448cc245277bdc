"""Calls load_model and unload_model on itself from initialize, which the
load under way waits for: Nereid refuses both at once (real Triton waits
forever). OUT holds what the calls raised."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.errors = []
        for call in (lambda: pb_utils.load_model("self_loader"),
                     lambda: pb_utils.unload_model("self_loader")):
            try:
                call()
                self.errors.append(None)
            except pb_utils.TritonModelException as error:
                self.errors.append(str(error))

    def execute(self, requests):
        out = np.array([json.dumps(self.errors).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]) for _ in requests]
