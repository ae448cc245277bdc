import numpy as np
import triton_python_backend_utils as pb_utils


def text(message):
    return pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", np.array([message], dtype=np.object_))])


class TritonPythonModel:
    def initialize(self, args):
        self.after_final = "none yet"

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            sender.send(text("previous: " + self.after_final))
            for args in ((text("x"), 5), (None, 0)):
                try:
                    sender.send(*args)
                except pb_utils.TritonModelException as error:
                    sender.send(text(str(error)))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            try:
                sender.send(text("late"))
            except pb_utils.TritonModelException as error:
                self.after_final = str(error)
        return None
