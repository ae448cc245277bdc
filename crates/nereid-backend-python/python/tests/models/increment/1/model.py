"""Adds 1, in place, to every input INPUT_<X> and returns it as OUTPUT_<X>:
inputs must be writable numpy arrays, as in Triton."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for tensor in request.inputs():
                array = tensor.as_numpy()
                array += 1
                outputs.append(pb_utils.Tensor("OUTPUT" + tensor.name()[len("INPUT"):], array))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
