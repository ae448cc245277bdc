"""Returns OUTPUT0 = INPUT0 * 2 as a (fake) GPU tensor made with
Tensor.from_dlpack, the way a torch model on `cuda:<device id>` does, and
reports in INFO what pb_utils says about that tensor. A request parameter
"producer" picks the stand-in: "dlpack1" (default), "legacy" or "capsule"."""

import json
import sys

import numpy as np
import triton_python_backend_utils as pb_utils
from fake_gpu import FakeGpuArray, LegacyGpuArray, cuda_capsule


def gpu_tensor(data, producer, device_id):
    if producer == "legacy":
        return pb_utils.Tensor.from_dlpack("OUTPUT0", LegacyGpuArray(data, device_id))
    if producer == "capsule":
        # A capsule over host memory labelled CUDA must not reach a real torch
        # or cupy: the worker would find neither and keep the bare capsule.
        sys.modules["torch"] = sys.modules["cupy"] = None
        return pb_utils.Tensor.from_dlpack("OUTPUT0", cuda_capsule(data, device_id))
    return pb_utils.Tensor.from_dlpack("OUTPUT0", FakeGpuArray(data, device_id))


class TritonPythonModel:
    def initialize(self, args):
        self.device_id = int(args["model_instance_device_id"])

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy() * 2
            producer = json.loads(request.parameters()).get("producer", "dlpack1")
            output = gpu_tensor(data, producer, self.device_id)
            try:
                output.as_numpy()
                as_numpy = None
            except pb_utils.TritonModelException as error:
                as_numpy = str(error)
            info = {"is_cpu": output.is_cpu(), "device": list(output.__dlpack_device__()),
                    "shape": output.shape(), "dtype": output.triton_dtype(), "as_numpy": as_numpy}
            info_tensor = pb_utils.Tensor("INFO", np.array([json.dumps(info)], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([output, info_tensor]))
        return responses
