import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        logger = pb_utils.Logger
        for request in requests:
            sender = request.get_response_sender()
            for index in range(1500):
                if sender.is_cancelled():
                    logger.log_warn(f"until_cancelled: cancelled after {index} responses")
                    break
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([index], dtype=np.int32))]))
                time.sleep(0.02)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
