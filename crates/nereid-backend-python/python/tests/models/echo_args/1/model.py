"""Reports what the backend hands a model: ARGS holds the initialize args as
JSON, REQUEST the request's metadata as JSON. It also logs at every level,
prints (Python and raw fd 1 writes, which must not reach the protocol pipe)
and logs from finalize."""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        print("echo_args: initialize printed this")
        sys.stdout.write('\x0e\x00\x00\x00{"op":"ready"}\n')
        os.write(1, b"echo_args: raw write to fd 1\n")
        pb_utils.Logger.log_info("initialize " + args["model_name"])

    def execute(self, requests):
        logger = pb_utils.Logger
        logger.log_info("info message")
        logger.log_warn("warn message")
        logger.log_error("error message")
        logger.log_verbose("verbose message")
        logger.log("explicit warning", logger.WARNING)
        print("echo_args: execute printed this")
        responses = []
        for request in requests:
            try:
                request.get_response_sender()
                sender_error = None
            except pb_utils.TritonModelException as error:
                sender_error = str(error)
            metadata = {
                "request_id": request.request_id(),
                "correlation_id": request.correlation_id(),
                "flags": request.flags(),
                "timeout": request.timeout(),
                "parameters": request.parameters(),
                "requested_output_names": sorted(request.requested_output_names()),
                "inputs": [tensor.name() for tensor in request.inputs()],
                "is_cancelled": request.is_cancelled(),
                "model_dir": pb_utils.get_model_dir(),
                "response_sender_error": sender_error,
            }
            outputs = [
                pb_utils.Tensor("ARGS", np.array([json.dumps(self.args)], dtype=np.object_)),
                pb_utils.Tensor("REQUEST", np.array([json.dumps(metadata)], dtype=np.object_)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses

    def finalize(self):
        pb_utils.Logger.log_info("finalize called")
