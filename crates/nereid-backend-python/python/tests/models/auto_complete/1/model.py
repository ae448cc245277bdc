"""After Triton's auto-complete example: the model supplies its inputs,
outputs, max_batch_size and dynamic batching, so it needs no config.pbtxt.
Unlike the example it always calls add_input/add_output, which fill in an
entry the configuration left partial and refuse a conflicting one."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        inputs = [
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4], "optional": True},
        ]
        outputs = [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}]

        for entry in inputs:
            auto_complete_model_config.add_input(entry)
        for entry in outputs:
            auto_complete_model_config.add_output(entry)

        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        pb_utils.Logger.log_info("auto-complete done")
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", in_0.astype(np.float32))])
            )
        return responses
