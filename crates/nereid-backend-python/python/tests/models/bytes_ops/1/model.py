"""A BYTES model: for each element of TEXT, UPPER is the element upper-cased
(bytes in, bytes out), LENGTH its byte length (INT32) and DECODED the element
decoded as UTF-8 (str objects, which the backend encodes back to UTF-8)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            upper = np.array([item.upper() for item in text.ravel()], dtype=np.object_)
            lengths = np.array([len(item) for item in text.ravel()], dtype=np.int32)
            decoded = np.array(
                [item.decode("utf-8", "replace") for item in text.ravel()], dtype=np.object_
            )
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("UPPER", upper.reshape(text.shape)),
                        pb_utils.Tensor("LENGTH", lengths.reshape(text.shape)),
                        pb_utils.Tensor("DECODED", decoded.reshape(text.shape)),
                    ]
                )
            )
        return responses
