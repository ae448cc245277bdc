import os
import sys

# The python backend stub embeds the interpreter in isolated mode, so it ignores
# PYTHONPATH; scripts/run-triton.sh puts the triton venv's site-packages there
# (numpy<2 lives in it). Add it by hand before anything imports numpy.
for _p in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
    if _p and _p not in sys.path:
        sys.path.insert(0, _p)

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out0 = pb_utils.Tensor("OUTPUT0", in0)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out0]))
        return responses
