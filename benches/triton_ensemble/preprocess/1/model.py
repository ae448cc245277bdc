"""Triton Python-backend model for benches/ensemble.sh: the shared ONNX Runtime
runner in benches/triton_models/onnx_model.py, for the model named by this
folder."""

import os
import sys

# A __pycache__ folder at the repository root would look like a model to
# Triton ("Poll failed for model directory '__pycache__'").
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from onnx_model import TritonPythonModel  # noqa: E402,F401
