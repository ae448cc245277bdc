#!/usr/bin/env python3
"""Writes Nereid's committed ONNX models and their Triton configs.

Two repositories, both in Triton's layout (`<model>/config.pbtxt`,
`<model>/<version>/model.onnx`):

- `model_repository/`: the examples the server runs out of the box
  (`simple`, `mlp`, `string_identity`, `add_sub_versions`, and the
  ensemble `mlp_pipeline`: `preprocess` feeding `mlp`);
- `tests/models/`: one `identity_<type>` model per data type, and
  `autofill_simple` (no `config.pbtxt`, for autofill tests).

The output is deterministic: weights come from a seeded generator and the
ONNX files carry no timestamps, so running the script twice writes the same
bytes (compare with `sha256sum`). Models use opset 17 and IR version 8,
which every ONNX Runtime >= 1.14 (and so the >= 1.24 we need) accepts.

Usage: .venv/bin/python scripts/make_models.py [--root REPO_ROOT]
       .venv/bin/python scripts/make_models.py --bench-mlp REPO

`--bench-mlp` writes only `mlp_large`, the benchmark's compute-bound MLP
(139 MB of weights, too big to commit), into REPO.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
PRODUCER = "nereid scripts/make_models.py"
MLP_SEED = 20240601
BATCH = "batch"

# Triton config type name, ONNX element type, suffix of the identity model.
IDENTITY_TYPES = [
    ("TYPE_BOOL", TensorProto.BOOL, "bool"),
    ("TYPE_UINT8", TensorProto.UINT8, "uint8"),
    ("TYPE_UINT16", TensorProto.UINT16, "uint16"),
    ("TYPE_UINT32", TensorProto.UINT32, "uint32"),
    ("TYPE_UINT64", TensorProto.UINT64, "uint64"),
    ("TYPE_INT8", TensorProto.INT8, "int8"),
    ("TYPE_INT16", TensorProto.INT16, "int16"),
    ("TYPE_INT32", TensorProto.INT32, "int32"),
    ("TYPE_INT64", TensorProto.INT64, "int64"),
    ("TYPE_FP16", TensorProto.FLOAT16, "fp16"),
    ("TYPE_BF16", TensorProto.BFLOAT16, "bf16"),
    ("TYPE_FP32", TensorProto.FLOAT, "fp32"),
    ("TYPE_FP64", TensorProto.DOUBLE, "fp64"),
    ("TYPE_STRING", TensorProto.STRING, "string"),
]


@dataclass(frozen=True)
class Io:
    """One input or output as both the config and the ONNX graph see it."""

    name: str
    config_type: str
    onnx_type: int
    # Dims without the batch dimension; -1 means "any size".
    dims: tuple[int, ...]


def onnx_shape(io: Io, batched: bool) -> list[int | str]:
    """The ONNX shape: a symbolic batch dim first when the model batches,
    and a named symbolic dim for every -1."""
    shape: list[int | str] = [BATCH] if batched else []
    for i, d in enumerate(io.dims):
        shape.append(f"{io.name.lower()}_dim{i}" if d < 0 else d)
    return shape


def value_info(io: Io, batched: bool) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(io.name, io.onnx_type, onnx_shape(io, batched))


def make_model(
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: list[Io],
    outputs: list[Io],
    batched: bool,
    initializers: list[onnx.TensorProto] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        name,
        [value_info(i, batched) for i in inputs],
        [value_info(o, batched) for o in outputs],
        initializer=initializers or [],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name=PRODUCER,
        producer_version="1",
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def config_text(
    name: str,
    max_batch_size: int,
    inputs: list[Io],
    outputs: list[Io],
    extra: str = "",
) -> str:
    """A config.pbtxt in the syntax Triton's own examples use."""

    def tensors(ios: list[Io]) -> str:
        items = []
        for io in ios:
            dims = ", ".join(str(d) for d in io.dims)
            items.append(
                "  {\n"
                f'    name: "{io.name}"\n'
                f"    data_type: {io.config_type}\n"
                f"    dims: [ {dims} ]\n"
                "  }"
            )
        return ",\n".join(items)

    text = (
        f'name: "{name}"\n'
        'platform: "onnxruntime_onnx"\n'
        f"max_batch_size: {max_batch_size}\n"
    )
    text += extra
    text += f"input [\n{tensors(inputs)}\n]\n"
    text += f"output [\n{tensors(outputs)}\n]\n"
    return text


def write_model(
    repo: Path,
    name: str,
    versions: dict[int, onnx.ModelProto],
    config: str | None,
) -> None:
    model_dir = repo / name
    model_dir.mkdir(parents=True, exist_ok=True)
    for version, model in versions.items():
        version_dir = model_dir / str(version)
        version_dir.mkdir(exist_ok=True)
        (version_dir / "model.onnx").write_bytes(model.SerializeToString(deterministic=True))
    config_path = model_dir / "config.pbtxt"
    if config is None:
        config_path.unlink(missing_ok=True)
    else:
        config_path.write_text(config)


# --- example models -------------------------------------------------------

SIMPLE_INPUTS = [
    Io("INPUT0", "TYPE_INT32", TensorProto.INT32, (16,)),
    Io("INPUT1", "TYPE_INT32", TensorProto.INT32, (16,)),
]
SIMPLE_OUTPUTS = [
    Io("OUTPUT0", "TYPE_INT32", TensorProto.INT32, (16,)),
    Io("OUTPUT1", "TYPE_INT32", TensorProto.INT32, (16,)),
]


def simple_model(name: str) -> onnx.ModelProto:
    """Triton's quick-start model: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    return make_model(name, nodes, SIMPLE_INPUTS, SIMPLE_OUTPUTS, batched=True)


MLP_SIZES = (256, 1024, 1024, 16)
# The benchmark's compute-bound MLP (benches/batching.sh): about 35 M
# multiply-adds per row, 139 MB of weights, so it is made when the benchmark
# runs rather than committed. benches/batching.sh reads both size lists.
MLP_LARGE_SIZES = (256, 4096, 4096, 4096, 16)


def mlp_model(name: str = "mlp", sizes: tuple[int, ...] = MLP_SIZES) -> onnx.ModelProto:
    """A classifier through `sizes` (256 -> 1024 -> 1024 -> 16 by default)
    with ReLU between layers.

    He-scaled normal weights keep activations of unit-variance inputs around
    unit variance, so the 16 logits are finite and differ from each other."""
    rng = np.random.default_rng(MLP_SEED)
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    current = "INPUT"
    for layer, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        weight = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        bias = (rng.standard_normal(fan_out) * 0.01).astype(np.float32)
        w_name, b_name = f"w{layer}", f"b{layer}"
        initializers += [numpy_helper.from_array(weight, w_name), numpy_helper.from_array(bias, b_name)]
        last = layer == len(sizes) - 2
        matmul, added = f"matmul{layer}", "OUTPUT" if last else f"add{layer}"
        nodes.append(helper.make_node("MatMul", [current, w_name], [matmul]))
        nodes.append(helper.make_node("Add", [matmul, b_name], [added]))
        if not last:
            nodes.append(helper.make_node("Relu", [added], [f"relu{layer}"]))
            current = f"relu{layer}"
    inputs, outputs = mlp_io(sizes)
    return make_model(name, nodes, inputs, outputs, batched=True, initializers=initializers)


def mlp_io(sizes: tuple[int, ...]) -> tuple[list[Io], list[Io]]:
    return (
        [Io("INPUT", "TYPE_FP32", TensorProto.FLOAT, (sizes[0],))],
        [Io("OUTPUT", "TYPE_FP32", TensorProto.FLOAT, (sizes[-1],))],
    )


def write_mlp(repo: Path, name: str, sizes: tuple[int, ...], instances: int | None = None) -> None:
    """An MLP that batches up to 64 with a 2 ms queue delay, on `instances`
    CPU instances (the backend's default when None)."""
    inputs, outputs = mlp_io(sizes)
    extra = "dynamic_batching {\n  max_queue_delay_microseconds: 2000\n}\n"
    if instances is not None:
        extra += f"instance_group [\n  {{\n    kind: KIND_CPU\n    count: {instances}\n  }}\n]\n"
    write_model(
        repo,
        name,
        {1: mlp_model(name, sizes)},
        config_text(
            name,
            64,
            inputs,
            outputs,
            extra=extra,
        ),
    )


STRING_IN = Io("INPUT0", "TYPE_STRING", TensorProto.STRING, (-1,))
STRING_OUT = Io("OUTPUT0", "TYPE_STRING", TensorProto.STRING, (-1,))

ADD_SUB_INPUTS = [
    Io("INPUT0", "TYPE_FP32", TensorProto.FLOAT, (4,)),
    Io("INPUT1", "TYPE_FP32", TensorProto.FLOAT, (4,)),
]
ADD_SUB_OUTPUTS = [Io("OUTPUT0", "TYPE_FP32", TensorProto.FLOAT, (4,))]


def binary_model(op: str) -> onnx.ModelProto:
    nodes = [helper.make_node(op, ["INPUT0", "INPUT1"], ["OUTPUT0"])]
    return make_model("add_sub_versions", nodes, ADD_SUB_INPUTS, ADD_SUB_OUTPUTS, batched=False)


def identity_model(name: str, io_in: Io, io_out: Io) -> onnx.ModelProto:
    nodes = [helper.make_node("Identity", [io_in.name], [io_out.name])]
    return make_model(name, nodes, [io_in], [io_out], batched=True)


PREPROCESS_IN = Io("RAW", "TYPE_UINT8", TensorProto.UINT8, (256,))
PREPROCESS_OUT = Io("SCALED", "TYPE_FP32", TensorProto.FLOAT, (256,))


def preprocess_model() -> onnx.ModelProto:
    """An image-style preprocessing step: SCALED = float(RAW) / 255."""
    scale = numpy_helper.from_array(np.array(1.0 / 255.0, dtype=np.float32), "scale")
    nodes = [
        helper.make_node("Cast", ["RAW"], ["raw_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["raw_f", "scale"], ["SCALED"]),
    ]
    return make_model(
        "preprocess", nodes, [PREPROCESS_IN], [PREPROCESS_OUT], batched=True, initializers=[scale]
    )


# Triton's ensemble syntax: `preprocess` turns RAW bytes into the MLP's input.
MLP_PIPELINE_CONFIG = """name: "mlp_pipeline"
platform: "ensemble"
max_batch_size: 64
input [
  {
    name: "RAW"
    data_type: TYPE_UINT8
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
ensemble_scheduling {
  step [
    {
      model_name: "preprocess"
      model_version: -1
      input_map {
        key: "RAW"
        value: "RAW"
      }
      output_map {
        key: "SCALED"
        value: "scaled"
      }
    },
    {
      model_name: "mlp"
      model_version: -1
      input_map {
        key: "INPUT"
        value: "scaled"
      }
      output_map {
        key: "OUTPUT"
        value: "OUTPUT"
      }
    }
  ]
}
"""


def write_ensemble(repo: Path, name: str, config: str) -> None:
    """An ensemble's folder: its config and an empty version folder (kept
    in git by a .gitkeep file)."""
    version_dir = repo / name / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    (version_dir / ".gitkeep").write_text("")
    (repo / name / "config.pbtxt").write_text(config)


def write_examples(repo: Path) -> None:
    write_model(
        repo,
        "preprocess",
        {1: preprocess_model()},
        config_text(
            "preprocess",
            64,
            [PREPROCESS_IN],
            [PREPROCESS_OUT],
            extra="dynamic_batching {\n  max_queue_delay_microseconds: 2000\n}\n",
        ),
    )
    write_ensemble(repo, "mlp_pipeline", MLP_PIPELINE_CONFIG)
    write_model(
        repo,
        "simple",
        {1: simple_model("simple")},
        config_text("simple", 8, SIMPLE_INPUTS, SIMPLE_OUTPUTS),
    )
    write_mlp(repo, "mlp", MLP_SIZES)
    write_model(
        repo,
        "string_identity",
        {1: identity_model("string_identity", STRING_IN, STRING_OUT)},
        config_text("string_identity", 8, [STRING_IN], [STRING_OUT]),
    )
    write_model(
        repo,
        "add_sub_versions",
        {1: binary_model("Add"), 2: binary_model("Mul")},
        config_text(
            "add_sub_versions",
            0,
            ADD_SUB_INPUTS,
            ADD_SUB_OUTPUTS,
            extra="version_policy: { all { } }\n",
        ),
    )


def write_test_models(repo: Path) -> None:
    for config_type, onnx_type, suffix in IDENTITY_TYPES:
        name = f"identity_{suffix}"
        io_in = Io("INPUT0", config_type, onnx_type, (-1,))
        io_out = Io("OUTPUT0", config_type, onnx_type, (-1,))
        write_model(
            repo,
            name,
            {1: identity_model(name, io_in, io_out)},
            config_text(name, 8, [io_in], [io_out]),
        )
    write_model(repo, "autofill_simple", {1: simple_model("autofill_simple")}, None)


BENCH_IDENTITY_IN = Io("INPUT0", "TYPE_FP32", TensorProto.FLOAT, (262144,))
BENCH_IDENTITY_OUT = Io("OUTPUT0", "TYPE_FP32", TensorProto.FLOAT, (262144,))


def write_bench_identity(repo: Path) -> None:
    """`identity_1mb`: 1 MiB of FP32 in and out (benches/protocol_extensions.sh
    moves it through shared memory and through the request body), and
    `mlp_cached` / `mlp_uncached`: the example MLP with and without
    `response_cache`."""
    write_model(
        repo,
        "identity_1mb",
        {1: identity_model("identity_1mb", BENCH_IDENTITY_IN, BENCH_IDENTITY_OUT)},
        config_text("identity_1mb", 8, [BENCH_IDENTITY_IN], [BENCH_IDENTITY_OUT]),
    )
    inputs, outputs = mlp_io(MLP_SIZES)
    for name, extra in [("mlp_cached", "response_cache {\n  enable: true\n}\n"), ("mlp_uncached", "")]:
        write_model(repo, name, {1: mlp_model(name, MLP_SIZES)}, config_text(name, 64, inputs, outputs, extra=extra))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument(
        "--bench-identity",
        type=Path,
        metavar="REPO",
        help="write only the shared-memory and cache benchmark's models into REPO",
    )
    parser.add_argument(
        "--bench-mlp",
        type=Path,
        metavar="REPO",
        help="write only the benchmark's `mlp_large` (256-2048-2048-2048-16) into REPO",
    )
    args = parser.parse_args()
    if args.bench_identity:
        write_bench_identity(args.bench_identity)
        return
    if args.bench_mlp:
        # One instance: a batch of this model keeps every core busy through
        # the shared thread pool, so a second instance only splits them.
        write_mlp(args.bench_mlp, "mlp_large", MLP_LARGE_SIZES, instances=1)
        return
    write_examples(args.root / "model_repository")
    write_test_models(args.root / "tests" / "models")


if __name__ == "__main__":
    main()
