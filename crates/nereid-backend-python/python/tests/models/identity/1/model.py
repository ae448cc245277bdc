"""Returns every input INPUT_<X> as OUTPUT_<X>, whatever its type.

Fixed-size outputs are handed back in Fortran order (not C-contiguous) so
the worker's handling of strided arrays is exercised; BF16, which numpy
cannot hold, goes through DLPack as Triton's documentation advises."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for tensor in request.inputs():
                name = "OUTPUT" + tensor.name()[len("INPUT"):]
                if tensor.triton_dtype() == pb_utils.TRITONSERVER_TYPE_BF16:
                    outputs.append(pb_utils.Tensor.from_dlpack(name, tensor.to_dlpack()))
                elif tensor.triton_dtype() == pb_utils.TRITONSERVER_TYPE_BYTES:
                    outputs.append(pb_utils.Tensor(name, tensor.as_numpy()))
                else:
                    outputs.append(pb_utils.Tensor(name, np.asfortranarray(tensor.as_numpy())))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
