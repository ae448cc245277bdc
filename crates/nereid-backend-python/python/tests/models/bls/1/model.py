"""Business Logic Scripting, blocking style: calls model "add_sub" twice.

The first call gets INPUT0 + INPUT1 and INPUT0 - INPUT1; the second feeds
that sum back in (as version 2, with request ID, correlation ID, flags,
timeout and parameters set) and gets (INPUT0 + INPUT1) + INPUT1. Outputs:
SUM, DIFF (first call) and SUM2 (second call). A failed call is answered
with its error."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            first = pb_utils.InferenceRequest(
                model_name="add_sub",
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[in_0, in_1],
            ).exec()
            if first.has_error():
                error = pb_utils.TritonError(first.error().message(), first.error().code())
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            total = pb_utils.get_output_tensor_by_name(first, "OUTPUT0")
            second = pb_utils.InferenceRequest(
                model_name="add_sub",
                model_version=2,
                request_id="second",
                correlation_id="sequence-7",
                flags=pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
                timeout=5,
                parameters={"call": 2, "tag": "x", "on": True},
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", total.as_numpy()), in_1],
            ).exec()
            if second.has_error():
                raise pb_utils.TritonModelException(second.error().message())
            outputs = [
                pb_utils.Tensor("SUM", total.as_numpy()),
                pb_utils.Tensor("DIFF", pb_utils.get_output_tensor_by_name(first, "OUTPUT1").as_numpy()),
                pb_utils.Tensor("SUM2", pb_utils.get_output_tensor_by_name(second, "OUTPUT0").as_numpy()),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
