import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            parameters = request.parameters()
            repetition = json.loads(parameters).get("repetition", 1)
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0]
            max_tokens = pb_utils.get_input_tensor_by_name(request, "max_tokens")
            if max_tokens is not None:
                text = text[: int(max_tokens.as_numpy()[0])]
            response = pb_utils.InferenceResponse([
                pb_utils.Tensor("text_output", np.array([text], dtype=np.object_)),
                pb_utils.Tensor("request_parameters", np.array([parameters], dtype=np.object_)),
            ])
            sender = request.get_response_sender()
            for _ in range(repetition):
                sender.send(response)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
