"""Expected answers for the example and test models, computed outside the
server (numpy, or ONNX Runtime's Python API on the same file)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

REPO_ROOT = Path(__file__).resolve().parents[2]

# Every identity test model: (model name, tritonclient datatype, numpy dtype).
IDENTITY_MODELS = [
    ("identity_bool", "BOOL", np.bool_),
    ("identity_uint8", "UINT8", np.uint8),
    ("identity_uint16", "UINT16", np.uint16),
    ("identity_uint32", "UINT32", np.uint32),
    ("identity_uint64", "UINT64", np.uint64),
    ("identity_int8", "INT8", np.int8),
    ("identity_int16", "INT16", np.int16),
    ("identity_int32", "INT32", np.int32),
    ("identity_int64", "INT64", np.int64),
    ("identity_fp16", "FP16", np.float16),
    ("identity_fp32", "FP32", np.float32),
    ("identity_fp64", "FP64", np.float64),
    ("identity_string", "BYTES", np.object_),
]


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype is np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype is np.object_:
        values = [b"", b"a", b"\x00nul\x00", b"\xff\xfe", "é".encode(), b"x" * 300]
        flat = [values[i % len(values)] for i in range(int(np.prod(shape)))]
        return np.array(flat, dtype=np.object_).reshape(shape)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return (rng.standard_normal(shape) * 100).astype(dtype)


def mlp_reference(x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(REPO_ROOT / "model_repository/mlp/1/model.onnx"))
    name = session.get_inputs()[0].name
    return session.run(None, {name: x})[0]
