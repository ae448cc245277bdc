"""Repositories of many ONNX models for the residency tests and bench:
each a table of random weights (different per model, so nothing is shared
by accident) that a request reads a row of, so ONNX Runtime can neither
fold nor drop it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROW = 16


def weights_model(repo: Path, name: str, megabytes: float, seed: int,
                  parameters: dict[str, str] | None = None) -> Path:
    """`repo/name`: INDEX (INT64, [1]) picks a row of a `megabytes` table
    of FP32 weights; ROW (FP32, [16]) is that row."""
    rows = max(1, int(megabytes * 1e6 / (ROW * 4)))
    table = np.random.default_rng(seed).standard_normal((rows, ROW), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["TABLE", "INDEX"], ["GATHERED"], axis=0),
         helper.make_node("Flatten", ["GATHERED"], ["ROW"], axis=0)],
        name,
        [helper.make_tensor_value_info("INDEX", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("ROW", TensorProto.FLOAT, [1, ROW])],
        initializer=[numpy_helper.from_array(table, "TABLE")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    onnx.save(model, folder / "1/model.onnx")
    params = "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
                     for k, v in (parameters or {}).items())
    (folder / "config.pbtxt").write_text(f'''name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ {{ name: "INDEX" data_type: TYPE_INT64 dims: [ 1 ] }} ]
output [ {{ name: "ROW" data_type: TYPE_FP32 dims: [ 1, {ROW} ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{params}''')
    return folder


def expected_row(megabytes: float, seed: int, index: int) -> np.ndarray:
    rows = max(1, int(megabytes * 1e6 / (ROW * 4)))
    table = np.random.default_rng(seed).standard_normal((rows, ROW), dtype=np.float32)
    return table[index].reshape(1, ROW)
