"""A client that does what Triton's image_client.py does with
`-i grpc --streaming`: model metadata and config over unary calls, then
a stream with a callback made by functools.partial, requests with a
classification output sent without waiting, `stop_stream()`, the answers
read afterwards, PASS, and the end of the program (with the client still
referenced at module level, as the example leaves it, so its __del__ runs
at interpreter exit).

    stream_then_exit.py URL MODEL REQUESTS
"""

import queue
import sys
from functools import partial

import numpy as np
import tritonclient.grpc as grpcclient


def completion_callback(answers, result, error):
    answers.put((result, error))


url, model, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = grpcclient.InferenceServerClient(url=url)
metadata = client.get_model_metadata(model_name=model, model_version="")
config = client.get_model_config(model_name=model, model_version="").config
name, datatype = metadata.inputs[0].name, metadata.inputs[0].datatype
output = metadata.outputs[0].name
answers = queue.Queue()
client.start_stream(partial(completion_callback, answers))
for sent in range(1, count + 1):
    data = np.random.rand(1, 3 * 64 * 64).astype(np.float32)
    tensor = grpcclient.InferInput(name, list(data.shape), datatype)
    tensor.set_data_from_numpy(data)
    client.async_stream_infer(
        model,
        [tensor],
        request_id=str(sent),
        model_version="",
        outputs=[grpcclient.InferRequestedOutput(output, class_count=1)],
    )
client.stop_stream()
for _ in range(count):
    result, error = answers.get()
    if error is not None:
        print(f"inference failed: {error}")
        sys.exit(1)
    print(f"Request {result.get_response().id}: {result.as_numpy(output)[0]}")
print("PASS")
