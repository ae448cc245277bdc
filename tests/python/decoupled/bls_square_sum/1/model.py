import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            call = pb_utils.InferenceRequest(
                model_name="square_int32",
                inputs=[pb_utils.Tensor("IN", value)],
                requested_output_names=["OUT"],
            )
            total, count = 0, 0
            for answer in call.exec(decoupled=True):
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                count += 1
                out = pb_utils.get_output_tensor_by_name(answer, "OUT")
                if out is not None:
                    total += int(out.as_numpy()[0])
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", np.array([total], dtype=np.int32)),
                pb_utils.Tensor("COUNT", np.array([count], dtype=np.int32)),
            ]))
        return responses
