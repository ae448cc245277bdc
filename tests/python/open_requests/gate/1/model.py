import os
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


def response(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))])


class TritonPythonModel:
    def initialize(self, args):
        self.changed = threading.Condition()
        self.openings = 0  # how often the gate opened
        self.cancelled = 0

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.answer, args=(request,), daemon=True).start()
        return None

    def answer(self, request):
        value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
        sender = request.get_response_sender()
        if value == -3:
            os._exit(3)
        if value == -1:
            with self.changed:
                self.openings += 1
                self.changed.notify_all()
            sender.send(response(-1), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        if value == -2:
            with self.changed:
                count = self.cancelled
            sender.send(response(count), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        with self.changed:
            opened = self.openings
        for index in range(value):
            sender.send(response(index))
        # Until the gate opens after this request came, or its client goes.
        with self.changed:
            while self.openings == opened:
                if sender.is_cancelled():
                    self.cancelled += 1
                    break
                self.changed.wait(0.01)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
