#!/usr/bin/env python3
"""Writes `mlp_tf`, the example MLP (`model_repository/mlp`: 256 → 1024 →
1024 → 16 with ReLU) as a Keras model exported to a SavedModel, with the
ONNX model's own weights, for benches/tensorflow.sh.

Two steps, because the weights live in an ONNX file and Keras in another
venv: on the project's venv (which has onnx),

    .venv/bin/python benches/tensorflow_models.py weights model_repository/mlp/1/model.onnx W.npz

then on scripts/setup-tensorflow-python.sh's venv,

    $(scripts/setup-tensorflow-python.sh) benches/tensorflow_models.py savedmodel W.npz REPO

which writes REPO/mlp_tf with `mlp`'s config (inputs `INPUT`, outputs
`OUTPUT`: the signature's keys)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

CONFIG = """name: "mlp_tf"
platform: "tensorflow_savedmodel"
max_batch_size: 64
dynamic_batching {
  max_queue_delay_microseconds: 2000
}
input [
  {
    name: "INPUT"
    data_type: TYPE_FP32
    dims: [ 256 ]
  }
]
output [
  {
    name: "OUTPUT"
    data_type: TYPE_FP32
    dims: [ 16 ]
  }
]
"""


def weights(onnx_file: str, out: str) -> None:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(onnx_file)
    arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    np.savez(out, **arrays)


def savedmodel(weights_file: str, repo: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    w = np.load(weights_file)
    layers = sorted(int(k[1:]) for k in w.files if k.startswith("w"))
    model = keras.Sequential([keras.Input((256,), name="INPUT")])
    for i in layers:
        dense = keras.layers.Dense(w[f"w{i}"].shape[1], activation="relu" if i < layers[-1] else None)
        model.add(dense)
        dense.set_weights([w[f"w{i}"], w[f"b{i}"]])

    # Keras's own exporter tracks the model's variables, so the SavedModel
    # loads in a session (TensorFlow's C API, as Triton loads it); a
    # tf.Module holding the model and a tf.function of its own does not.
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serving_default", lambda x: {"OUTPUT": model(x)},
                         input_signature=[tf.TensorSpec([None, 256], tf.float32, name="INPUT")])
    folder = Path(repo) / "mlp_tf"
    archive.write_out(str(folder / "1/model.savedmodel"))
    (folder / "config.pbtxt").write_text(CONFIG)


if __name__ == "__main__":
    if sys.argv[1] == "weights":
        weights(sys.argv[2], sys.argv[3])
    else:
        savedmodel(sys.argv[2], sys.argv[3])
