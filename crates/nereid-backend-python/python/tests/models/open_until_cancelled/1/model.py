"""A decoupled model whose requests stay open past execute: a thread per
request waits until the request is cancelled, then answers OUT = IN with
the final flag."""

import threading
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.answer, args=(request,), daemon=True).start()
        return None

    def answer(self, request):
        while not request.is_cancelled():
            time.sleep(0.005)
        data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
        request.get_response_sender().send(
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data)]),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )
