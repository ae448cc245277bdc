import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Answers during execute: IN responses, then the final flag alone."""

    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            for _ in range(count):
                out = pb_utils.Tensor("OUT", np.array([count], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
