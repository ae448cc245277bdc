#!/usr/bin/env python3
"""Counts what issue 34 ("one typed request path") measures before and
after: lines per crate, file cycles, files over 500 lines, functions over
80 lines, and the places that read `sequence_id`. Product code only: test
files (`tests/` folders, `*tests*.rs`, `testing.rs`, `test_support.rs`)
and `#[cfg(test)]` modules at the end of a file are left out.

    scripts/house_metrics.py [ROOT]      # ROOT: the repository (default: here)

A file cycle is a set of files of one crate (or one Python package) that
reach each other through `use crate::...`, `super::...` or `self::...`
paths (Python: relative imports); each cycle is printed with its files.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

FILE_LIMIT = 500
FUNCTION_LIMIT = 80
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")
PATH = re.compile(r"\b(crate|super|self)((?:::\w+)+)")
PY_IMPORT = re.compile(r"^\s*from\s+(\.+)(\w*)\s+import\s+([\w, ]+)")


def is_test_file(path: Path) -> bool:
    return "tests" in path.parts or "tests" in path.stem or path.stem in ("testing", "test_support")


def product_lines(path: Path) -> list[str]:
    """The file's lines up to its `#[cfg(test)]` module, if any."""
    lines = path.read_text(errors="replace").splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and lines[i + 1].startswith("mod "):
            return lines[:i]
    return lines


def module_of(src: Path, path: Path) -> tuple[str, ...]:
    """`src/a/b.rs` -> ("a", "b"); `src/a/mod.rs` -> ("a",); lib/main -> ()."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def long_functions(lines: list[str]) -> list[tuple[str, int]]:
    """(name, lines) of each function longer than FUNCTION_LIMIT, by brace
    counting from its `fn` line (strings and comments are not parsed: a
    brace inside one can skew a count)."""
    found = []
    i = 0
    while i < len(lines):
        match = FN.match(lines[i])
        if not match or lines[i].rstrip().endswith(";"):
            i += 1
            continue
        depth, opened, j = 0, False, i
        while j < len(lines):
            code = lines[j].split("//")[0]
            depth += code.count("{") - code.count("}")
            opened |= "{" in code
            if opened and depth <= 0:
                break
            if not opened and code.rstrip().endswith(";"):
                break
            j += 1
        length = j - i + 1
        if opened and length > FUNCTION_LIMIT:
            found.append((match.group(6), length))
        i += 1 if not opened else 1
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one node (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in list(graph):
        if node not in index:
            visit(node)
    return out


def rust_graph(src: Path, files: list[Path]) -> dict[str, set[str]]:
    """Which files of a crate name which others, by module path."""
    modules = {module_of(src, f): f for f in files}
    graph: dict[str, set[str]] = defaultdict(set)
    for f in files:
        here = module_of(src, f)
        # A file's own module: `super` of `a/b.rs` is `a`, of `a/mod.rs` its parent.
        parent = here[:-1] if f.stem not in ("mod", "lib", "main") or here else here
        for line in product_lines(f):
            for root, rest in PATH.findall(line):
                base = {"crate": (), "super": parent, "self": here}[root]
                path = base + tuple(p for p in rest.split("::") if p)
                while path and path not in modules:
                    path = path[:-1]
                target = modules.get(path)
                if target is not None and target != f and path:
                    graph[str(f)].add(str(target))
    return graph


def python_graph(package: Path) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for f in package.glob("*.py"):
        for line in f.read_text(errors="replace").splitlines():
            match = PY_IMPORT.match(line)
            if not match or len(match.group(1)) != 1:
                continue
            names = [match.group(2)] if match.group(2) else [
                n.strip() for n in match.group(3).split(",")]
            for name in names:
                target = package / f"{name}.py"
                if target.is_file() and target != f:
                    graph[str(f)].add(str(target))
    return graph


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    crates = sorted(p for p in (root / "crates").iterdir() if (p / "Cargo.toml").is_file())
    total = 0
    per_crate, big_files, long_fns, all_cycles, sequence_reads = [], [], [], [], []
    for crate in crates:
        src = crate / "src"
        files = sorted(f for f in src.rglob("*.rs") if not is_test_file(f.relative_to(crate)))
        count = 0
        for f in files:
            lines = product_lines(f)
            count += len(lines)
            rel = f.relative_to(root)
            if len(lines) > FILE_LIMIT:
                big_files.append((len(lines), str(rel)))
            long_fns += [(n, str(rel), name) for name, n in long_functions(lines)]
            sequence_reads += [f"{rel}:{i + 1}" for i, line in enumerate(lines)
                               if '"sequence_id"' in line and not line.strip().startswith("//")]
        per_crate.append((crate.name, count))
        total += count
        all_cycles += cycles(rust_graph(src, files))
        for package in crate.rglob("__init__.py"):
            if not is_test_file(package.relative_to(crate)):
                all_cycles += cycles(python_graph(package.parent))
    print(f"product lines: {total}")
    for name, count in sorted(per_crate, key=lambda c: -c[1]):
        print(f"  {name}: {count} ({100 * count / max(total, 1):.1f}%)")
    print(f"file cycles: {len(all_cycles)}")
    for cycle in all_cycles:
        print("  " + " <-> ".join(str(Path(p).relative_to(root)) for p in cycle))
    print(f"files over {FILE_LIMIT} lines: {len(big_files)}")
    for n, path in sorted(big_files, reverse=True):
        print(f"  {path}: {n}")
    print(f"functions over {FUNCTION_LIMIT} lines: {len(long_fns)}")
    for n, path, name in sorted(long_fns, reverse=True):
        print(f"  {path} {name}: {n}")
    print(f"lines that name \"sequence_id\": {len(sequence_reads)}")
    for place in sequence_reads:
        print(f"  {place}")


if __name__ == "__main__":
    main()
