"""scripts/house_metrics.py, the count issue 34 measures the house by, on a
small tree made here: a crate with a file cycle, a long function, a long
file, a test module that does not count, and a Python package cycle."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO_ROOT


def run(root):
    script = REPO_ROOT / "scripts/house_metrics.py"
    return subprocess.run([sys.executable, str(script), str(root)], capture_output=True,
                          text=True, check=True, timeout=120).stdout


def test_it_counts_cycles_long_files_and_functions_and_sequence_reads(tmp_path):
    src = tmp_path / "crates/demo/src"
    src.mkdir(parents=True)
    (tmp_path / "crates/demo/Cargo.toml").write_text('[package]\nname = "demo"\n')
    (src / "lib.rs").write_text("mod a;\nmod b;\nmod c;\n")
    (src / "a.rs").write_text("use crate::b::B;\npub struct A;\n")
    (src / "b.rs").write_text("use super::a::A;\npub struct B;\n")
    body = "\n".join(f"    let x{i} = {i};" for i in range(90))
    (src / "c.rs").write_text(
        "pub fn long() {\n" + body + "\n}\n"
        + "pub fn reads(p: &P) { p.get(\"sequence_id\"); }\n"
        + "\n" * 500
        + "#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n"
    )
    package = tmp_path / "crates/demo/python/pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "x.py").write_text("from .y import f\n")
    (package / "y.py").write_text("from . import x\n")
    out = run(tmp_path)
    assert "file cycles: 2" in out, out
    assert "crates/demo/src/a.rs <-> crates/demo/src/b.rs" in out, out
    assert "crates/demo/python/pkg/x.py <-> crates/demo/python/pkg/y.py" in out, out
    assert "files over 500 lines: 1" in out and "crates/demo/src/c.rs: 593" in out, out
    assert "functions over 80 lines: 1" in out and "c.rs long: 92" in out, out
    assert 'lines that name "sequence_id": 1' in out and "crates/demo/src/c.rs:93" in out, out


def test_a_tree_without_them_counts_none(tmp_path):
    src = tmp_path / "crates/plain/src"
    src.mkdir(parents=True)
    (tmp_path / "crates/plain/Cargo.toml").write_text('[package]\nname = "plain"\n')
    (src / "lib.rs").write_text("mod a;\npub use a::A;\n")
    (src / "a.rs").write_text("pub struct A;\n")
    out = run(tmp_path)
    for line in ("file cycles: 0", "files over 500 lines: 0", "functions over 80 lines: 0",
                 'lines that name "sequence_id": 0'):
        assert line in out, out
