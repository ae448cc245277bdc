import threading
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.answer, args=(request,), daemon=True).start()
        return None

    def answer(self, request):
        # Most likely after execute has returned, so that the call comes
        # while the server reads only the open requests' frames.
        time.sleep(0.1)
        value = pb_utils.get_input_tensor_by_name(request, "IN")
        call = pb_utils.InferenceRequest(
            model_name="double", inputs=[value], requested_output_names=["OUT"]
        )
        answer = call.exec()
        sender = request.get_response_sender()
        if answer.has_error():
            sender.send(
                pb_utils.InferenceResponse(error=answer.error()),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
            return
        out = pb_utils.get_output_tensor_by_name(answer, "OUT")
        sender.send(
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out.as_numpy())]),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )
