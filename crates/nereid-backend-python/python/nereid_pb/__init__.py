"""Implementation of Nereid's `triton_python_backend_utils` module.

User models import `triton_python_backend_utils` (next to this package), which
re-exports the public names defined here. The split keeps every file small:

- `errors`: TritonError, TritonModelException and the "not supported yet"
  errors for Triton calls Nereid cannot honour.
- `dtypes`: Triton data-type numbers, wire names, numpy mappings and the BYTES
  element framing.
- `tensor` and `dlpack`: pb_utils.Tensor and its DLPack interchange.
- `inference`: InferenceRequest / InferenceResponse (and BLS).
- `model_config`: ModelConfig for `auto_complete_config`.
- `logger`: pb_utils.Logger.
- `metrics`: pb_utils.MetricFamily and its Metric (custom metrics).
- `model_control`: pb_utils.load_model, unload_model, is_model_ready.
- `calls`: what those share: pybind11's argument errors, the way to the
  server.
- `runtime`: the worker-side state those objects reach (BLS and side calls
  in flight, cancellation state, the frame channels); absent outside a
  worker.
- `inbox`: reading frames from whichever thread waits for one.
- `shm` and `wire`: shared-memory files, frames and tensor descriptors.
"""
