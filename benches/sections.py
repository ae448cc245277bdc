"""Replacing one generated section of docs/benchmarks.md, shared by the
report scripts. A section sits between its begin and end markers; a file
without them gets the section appended."""

from __future__ import annotations

from pathlib import Path


def write_section(out: Path, begin: str, end: str, body: str) -> None:
    """Puts `body` between `begin` and `end` in `out`, in place of what was there."""
    text = out.read_text() if out.is_file() else ""
    block = f"{begin}\n{body}{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + block + "\n"
    out.write_text(text)
