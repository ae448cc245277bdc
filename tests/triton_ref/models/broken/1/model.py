# Fails on purpose so that the model ends up in the UNAVAILABLE state
# (used for the "model not ready" cases).
import os
import sys

for _p in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
    if _p and _p not in sys.path:
        sys.path.insert(0, _p)


class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("broken on purpose")

    def execute(self, requests):
        return []
