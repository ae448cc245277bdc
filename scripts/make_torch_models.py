#!/usr/bin/env python3
"""Writes Nereid's committed TorchScript models and their Triton configs.

Needs the complete torch 2.13 (`scripts/setup-torch-python.sh` installs it
in .tools/torch-venv, several GB); serving and testing them needs only
libtorch. The `.pt` files are committed, so neither CI nor `make test` runs
this script. Two repositories:

- `model_repository_torch/`: what `make run TORCH=1` serves beside
  `model_repository/`: `mlp_torch` (the same weights as the ONNX `mlp`,
  read from `model_repository/mlp/1/model.onnx`) and `add_sub_torch` (the
  TorchScript twin of `simple`);
- `tests/models_torch/`: one model per behaviour the tests check (every
  datatype, tuple and list outputs, `List[str]`, dict input, the naming
  conventions, Triton's parameters, models that fail).

Usage: $(scripts/setup-torch-python.sh) scripts/make_torch_models.py
       $(scripts/setup-torch-python.sh) scripts/make_torch_models.py --mlp-twin ONNX_MODEL_DIR

`--mlp-twin` writes only the TorchScript twin of an ONNX MLP folder made by
make_models.py (`<dir>_torch` beside it, same weights and config), as
benches/torch.sh does for the benchmark's `mlp_large` (too big to commit).
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import onnx
import torch
from onnx import numpy_helper


class Mlp(torch.nn.Module):
    """Linear layers with ReLU between them, computing exactly the ONNX
    `mlp`'s MatMul + Add chain (weights as [in, out], not nn.Linear's [out, in])."""

    def __init__(self, weights: list[np.ndarray], biases: list[np.ndarray]):
        super().__init__()
        self.weights = torch.nn.ParameterList([torch.nn.Parameter(torch.from_numpy(w.copy()), requires_grad=False) for w in weights])
        self.biases = torch.nn.ParameterList([torch.nn.Parameter(torch.from_numpy(b.copy()), requires_grad=False) for b in biases])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = torch.matmul(x, w) + b
            if i != last:
                x = torch.relu(x)
        return x


class AddSub(torch.nn.Module):
    def forward(self, INPUT0: torch.Tensor, INPUT1: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return INPUT0 + INPUT1, INPUT0 - INPUT1


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class MultiOutput(torch.nn.Module):
    """Three outputs of three datatypes, returned as a tuple."""

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return x + 1.0, x.sum(dim=1, keepdim=True).to(torch.int64), x > 0


class ListOutput(torch.nn.Module):
    """Outputs as a list of tensors rather than a tuple."""

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        return [x * 2.0, x * 3.0]


class Strings(torch.nn.Module):
    """`List[str]` in; the same strings and each one's length out."""

    def forward(self, x: List[str]) -> Tuple[List[str], torch.Tensor]:
        lengths = [len(s) for s in x]
        return x, torch.tensor(lengths, dtype=torch.int64)


class DictInput(torch.nn.Module):
    def forward(self, inputs: Dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["a"] - inputs["b"]


class Subtract(torch.nn.Module):
    """x - y: which tensor binds to which argument shows in the answer."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x - y


class Raises(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x < 0).any()):
            raise ValueError("negative input")
        return x


class Scalar(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum()


def save(module: torch.nn.Module, path: Path, example: torch.Tensor | None = None) -> None:
    """Scripts `module`, or traces it on `example` (for modules whose Python
    TorchScript cannot compile, such as loops over a ParameterList)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    module = module.eval()
    compiled = torch.jit.trace(module, example) if example is not None else torch.jit.script(module)
    torch.jit.save(compiled, str(path))


def io_block(kind: str, entries: list[tuple[str, str, list[int]]]) -> str:
    body = ",\n".join(
        f'  {{\n    name: "{name}"\n    data_type: {dtype}\n    dims: [ {", ".join(map(str, dims))} ]\n  }}'
        for name, dtype, dims in entries
    )
    return f"{kind} [\n{body}\n]\n"


def write(
    repo: Path,
    name: str,
    module: torch.nn.Module | None,
    inputs: list[tuple[str, str, list[int]]] | None,
    outputs: list[tuple[str, str, list[int]]] | None,
    max_batch_size: int = 0,
    extra: str = "",
    example: torch.Tensor | None = None,
) -> Path:
    """Writes `<repo>/<name>/config.pbtxt` (unless inputs and outputs are
    both None) and `<repo>/<name>/1/model.pt`."""
    folder = repo / name
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "1").mkdir(parents=True)
    if module is not None:
        save(module, folder / "1" / "model.pt", example)
    if inputs is not None or outputs is not None:
        text = f'name: "{name}"\nplatform: "pytorch_libtorch"\nmax_batch_size: {max_batch_size}\n'
        text += io_block("input", inputs or []) if inputs else ""
        text += io_block("output", outputs or []) if outputs else ""
        text += extra
        (folder / "config.pbtxt").write_text(text)
    return folder


def onnx_mlp_weights(onnx_path: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    model = onnx.load(str(onnx_path))
    tensors = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    layers = sum(1 for name in tensors if name.startswith("w"))
    return [tensors[f"w{i}"] for i in range(layers)], [tensors[f"b{i}"] for i in range(layers)]


DYNAMIC = "dynamic_batching {\n  max_queue_delay_microseconds: 2000\n}\n"

TYPES = {
    "bool": "TYPE_BOOL",
    "uint8": "TYPE_UINT8",
    "int8": "TYPE_INT8",
    "int16": "TYPE_INT16",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "fp16": "TYPE_FP16",
    "fp32": "TYPE_FP32",
    "fp64": "TYPE_FP64",
    "bf16": "TYPE_BF16",
}

PARAMETERS = {
    "DISABLE_OPTIMIZED_EXECUTION": "true",
    "INFERENCE_MODE": "false",
    "ENABLE_JIT_EXECUTOR": "true",
    "ENABLE_JIT_PROFILING": "false",
    "ENABLE_WEIGHT_SHARING": "true",
    "INTRA_OP_THREAD_COUNT": "2",
    "INTER_OP_THREAD_COUNT": "1",
    "ENABLE_CACHE_CLEANING": "true",
}


def write_mlp_twin(onnx_dir: Path, repo: Path, name: str) -> None:
    """The TorchScript twin of the ONNX MLP in `onnx_dir`: same weights,
    same batching and instances, inputs and outputs named by index."""
    weights, biases = onnx_mlp_weights(onnx_dir / "1" / "model.onnx")
    sizes = [weights[0].shape[0], weights[-1].shape[1]]
    onnx_config = (onnx_dir / "config.pbtxt").read_text()
    extra = DYNAMIC
    group = re.search(r"^instance_group \[.*?^\]\n", onnx_config, re.MULTILINE | re.DOTALL)
    if group:
        extra += group.group(0)
    write(repo, name, Mlp(weights, biases), [("INPUT__0", "TYPE_FP32", [sizes[0]])],
          [("OUTPUT__0", "TYPE_FP32", [sizes[1]])], max_batch_size=64, extra=extra,
          example=torch.zeros(1, sizes[0]))


def write_examples(root: Path) -> None:
    repo = root / "model_repository_torch"
    write_mlp_twin(root / "model_repository" / "mlp", repo, "mlp_torch")
    write(repo, "add_sub_torch", AddSub(), [("INPUT0", "TYPE_INT32", [16]), ("INPUT1", "TYPE_INT32", [16])],
          [("OUTPUT__0", "TYPE_INT32", [16]), ("OUTPUT__1", "TYPE_INT32", [16])], max_batch_size=8)


def write_tests(root: Path) -> None:
    repo = root / "tests" / "models_torch"
    for short, dtype in TYPES.items():
        write(repo, f"torch_identity_{short}", Identity(), [("INPUT__0", dtype, [-1])],
              [("OUTPUT__0", dtype, [-1])], max_batch_size=8)
    write(repo, "torch_multi_output", MultiOutput(), [("INPUT__0", "TYPE_FP32", [4])],
          # Listed out of order: each output is found by its __index.
          [("OUT__2", "TYPE_BOOL", [4]), ("OUT__0", "TYPE_FP32", [4]), ("OUT__1", "TYPE_INT64", [1])],
          max_batch_size=8)
    write(repo, "torch_list_output", ListOutput(), [("INPUT__0", "TYPE_FP32", [3])],
          [("DOUBLE", "TYPE_FP32", [3]), ("TRIPLE", "TYPE_FP32", [3])], max_batch_size=4)
    write(repo, "torch_strings", Strings(), [("INPUT__0", "TYPE_STRING", [-1])],
          [("OUTPUT__0", "TYPE_STRING", [-1]), ("OUTPUT__1", "TYPE_INT64", [-1])])
    write(repo, "torch_dict_input", DictInput(), [("a", "TYPE_FP32", [2]), ("b", "TYPE_FP32", [2])],
          [("OUTPUT__0", "TYPE_FP32", [2])], max_batch_size=4)
    # Config names match forward()'s arguments, in the other order.
    write(repo, "torch_forward_args", Subtract(), [("y", "TYPE_FP32", [2]), ("x", "TYPE_FP32", [2])],
          [("OUTPUT__0", "TYPE_FP32", [2])], max_batch_size=4)
    # Names neither forward()'s nor <name>__<index>: config order binds them.
    write(repo, "torch_strict_order", Subtract(), [("first", "TYPE_FP32", [2]), ("second", "TYPE_FP32", [2])],
          [("difference", "TYPE_FP32", [2])], max_batch_size=4)
    params = "".join(
        f'parameters {{\n  key: "{k}"\n  value: {{ string_value: "{v}" }}\n}}\n' for k, v in PARAMETERS.items()
    )
    write(repo, "torch_parameters", Subtract(), [("x", "TYPE_FP32", [2]), ("y", "TYPE_FP32", [2])],
          [("OUTPUT__0", "TYPE_FP32", [2])], max_batch_size=4,
          extra=params + "instance_group [\n  {\n    kind: KIND_CPU\n    count: 2\n  }\n]\n")
    write(repo, "torch_raises", Raises(), [("INPUT__0", "TYPE_FP32", [-1])], [("OUTPUT__0", "TYPE_FP32", [-1])])
    write(repo, "torch_scalar_output", Scalar(), [("INPUT__0", "TYPE_FP32", [-1])],
          [("OUTPUT__0", "TYPE_FP32", [1])])
    # No config.pbtxt: forward()'s argument names are filled in, the rest is missing.
    write(repo, "torch_no_config", Subtract(), None, None)
    bad = write(repo, "torch_bad_file", None, [("INPUT__0", "TYPE_FP32", [-1])], [("OUTPUT__0", "TYPE_FP32", [-1])])
    (bad / "1" / "model.pt").write_bytes(b"this is not a TorchScript archive\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--mlp-twin", type=Path, metavar="ONNX_MODEL_DIR",
                        help="write only the TorchScript twin of this ONNX MLP folder, beside it")
    args = parser.parse_args()
    if args.mlp_twin:
        folder = args.mlp_twin.resolve()
        write_mlp_twin(folder, folder.parent, folder.name + "_torch")
        return
    torch.manual_seed(0)
    write_examples(args.root)
    write_tests(args.root)


if __name__ == "__main__":
    main()
