import os
import sys
import threading
import time

# Triton's stub runs an isolated interpreter: the venv's site-packages come
# from PYTHONPATH (scripts/run-triton.sh sets it).
for _path in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
    if _path and _path not in sys.path:
        sys.path.insert(0, _path)

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
PACE_S = 0.010


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.stream, args=(request,), daemon=True).start()
        return None

    def stream(self, request):
        count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
        sender = request.get_response_sender()
        for index in range(count):
            if index:
                time.sleep(PACE_S)
            out = pb_utils.Tensor("OUT", np.array([index], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse([out]), flags=FINAL if index == count - 1 else 0)
