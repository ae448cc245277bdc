"""Writes the SavedModels tests/python/test_tensorflow.py serves, with
TensorFlow's own Python API, and TensorFlow's answers to fixed inputs.

Runs on the full tensorflow-cpu (scripts/setup-tensorflow-python.sh), not
on the tests' venv: `$(scripts/setup-tensorflow-python.sh)
tests/python/make_savedmodels.py REPO ANSWERS.npz`.

REPO gets, with no config.pbtxt unless said:
- `tf_dense/1/model.savedmodel`: y = x @ W + b, x float32 [None, 4];
- `tf_two_signatures/1/model.savedmodel`: `serving_default` adds, `multiply`
  multiplies (int32 [None, 2]); `tf_multiply` is the same files with a
  config that names only the platform and `TF_SIGNATURE_DEF: multiply`;
- `tf_strings/1/model.savedmodel`: `text` tf.string [None, 1] -> `upper`
  (tf.string) and `length` (int32);
- `tf_words/1/model.savedmodel`: `text` tf.string [None] -> `upper`: rank 1,
  so autofill gives `dims: [1]` with an empty `reshape`;
- `tf_keras/1/model.savedmodel`: a Keras MLP exported by `model.export`;
- `tf_serving/1/` and `tf_serving/2/`: the dense model in TF Serving's
  layout (saved_model.pb and variables/ in the version folder), version 2
  with its bias plus one.

ANSWERS holds each model's inputs and TensorFlow's outputs, keyed
`<model>/<in|out>/<name>`, computed by loading the saved files again."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

SEED = 37


class Dense(tf.Module):
    def __init__(self, bias_shift: float = 0.0):
        super().__init__()
        rng = np.random.default_rng(SEED)
        self.w = tf.Variable(rng.standard_normal((4, 3)).astype(np.float32))
        self.b = tf.Variable((rng.standard_normal(3) + bias_shift).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.matmul(x, self.w) + self.b}


class TwoSignatures(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.int32, name="a"),
                                  tf.TensorSpec([None, 2], tf.int32, name="b")])
    def add(self, a, b):
        return {"sum": a + b}

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.int32, name="a"),
                                  tf.TensorSpec([None, 2], tf.int32, name="b")])
    def multiply(self, a, b):
        return {"product": a * b}


class Strings(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.string, name="text")])
    def serve(self, text):
        return {"upper": tf.strings.upper(text), "length": tf.strings.length(text)}


class Words(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text):
        return {"upper": tf.strings.upper(text)}


def keras_mlp(path: Path) -> None:
    import keras

    keras.utils.set_random_seed(SEED)
    model = keras.Sequential([
        keras.Input((8,), name="features"),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(4),
    ])
    model.export(str(path), format="tf_saved_model")


def answers(path: Path, model: str, inputs: dict[str, np.ndarray], signature: str,
            out: dict[str, np.ndarray]) -> None:
    """TensorFlow's own answer, from the files as saved."""
    fn = tf.saved_model.load(str(path)).signatures[signature]
    results = fn(**{k: tf.constant(v) for k, v in inputs.items()})
    for name, value in inputs.items():
        out[f"{model}/in/{name}"] = value
    for name, value in results.items():
        out[f"{model}/out/{name}"] = value.numpy()


def main(repo: Path, answers_file: Path) -> None:
    shutil.rmtree(repo, ignore_errors=True)
    out: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(SEED)

    dense = repo / "tf_dense/1/model.savedmodel"
    module = Dense()
    tf.saved_model.save(module, str(dense), signatures={"serving_default": module.serve})
    answers(dense, "tf_dense", {"x": rng.standard_normal((3, 4)).astype(np.float32)}, "serving_default", out)

    two = repo / "tf_two_signatures/1/model.savedmodel"
    module = TwoSignatures()
    tf.saved_model.save(module, str(two), signatures={"serving_default": module.add, "multiply": module.multiply})
    pair = {"a": np.array([[1, 2], [3, 4]], np.int32), "b": np.array([[5, 6], [7, 8]], np.int32)}
    answers(two, "tf_two_signatures", pair, "serving_default", out)
    shutil.copytree(repo / "tf_two_signatures", repo / "tf_multiply")
    (repo / "tf_multiply/config.pbtxt").write_text(
        'platform: "tensorflow_savedmodel"\n'
        'parameters { key: "TF_SIGNATURE_DEF" value: { string_value: "multiply" } }\n')
    answers(two, "tf_multiply", pair, "multiply", out)

    strings = repo / "tf_strings/1/model.savedmodel"
    module = Strings()
    tf.saved_model.save(module, str(strings), signatures={"serving_default": module.serve})
    text = np.array([[b"hello"], [b"TensorFlow \xc3\xa9t\xc3\xa9"], [b""]], dtype=object)
    answers(strings, "tf_strings", {"text": text}, "serving_default", out)

    words = repo / "tf_words/1/model.savedmodel"
    module = Words()
    tf.saved_model.save(module, str(words), signatures={"serving_default": module.serve})
    answers(words, "tf_words", {"text": np.array([b"one", b"two words"], dtype=object)}, "serving_default", out)

    keras_dir = repo / "tf_keras/1/model.savedmodel"
    keras_mlp(keras_dir)
    answers(keras_dir, "tf_keras", {"features": rng.standard_normal((4, 8)).astype(np.float32)},
            "serving_default", out)

    for version, shift in ((1, 0.0), (2, 1.0)):
        module = Dense(bias_shift=shift)
        folder = repo / f"tf_serving/{version}"
        tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
    answers(repo / "tf_serving/2", "tf_serving", {"x": out["tf_dense/in/x"]}, "serving_default", out)

    np.savez(answers_file, **out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
