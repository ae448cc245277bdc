import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Each request is answered from a thread of its own, after execute
    returned: one response per element of IN, then the final flag alone."""

    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            thread = threading.Thread(target=self.answer, args=(request,))
            thread.start()
            self.threads.append(thread)
        return None

    def answer(self, request):
        values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
        delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
        wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
        sender = request.get_response_sender()
        for index, value in enumerate(values):
            time.sleep(int(delays[index]) / 1000)
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
            ]))
        time.sleep(int(wait[0]) / 1000)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
