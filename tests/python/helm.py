"""Real Helm (3.17, scripts/setup-helm.sh puts it in .tools/helm) for the
deploy tests: `helm template` renders the chart as `helm install` would,
with its dependency checks, and `helm lint` reads it as Helm does."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import yaml

from conftest import REPO_ROOT


def helm_binary() -> str:
    return os.environ.get("HELM_BIN", str(REPO_ROOT / ".tools/helm/helm"))


def helm(*args: str) -> str:
    """Runs helm with `args` (no cluster: HOME and Helm's folders in a
    scratch directory); its standard output, or an assertion with its
    errors."""
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HOME": home, "HELM_CACHE_HOME": f"{home}/cache",
               "HELM_CONFIG_HOME": f"{home}/config", "HELM_DATA_HOME": f"{home}/data",
               "KUBECONFIG": f"{home}/no-cluster"}
        done = subprocess.run([helm_binary(), *args], env=env, capture_output=True,
                              text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stderr}"
    return done.stdout


class Chart:
    """A chart with values on top of its values.yaml, as `-f` gives them
    (a null removes a default)."""

    def __init__(self, root: Path, values: dict | None = None, release: str = "nereid"):
        self.root = root
        self.values = values or {}
        self.release = release

    def documents(self) -> list[dict]:
        """Every object `helm template` makes."""
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values:
            yaml.safe_dump(self.values, values)
            values.flush()
            text = helm("template", self.release, str(self.root), "-f", values.name)
        return [doc for doc in yaml.safe_load_all(text) if doc]
