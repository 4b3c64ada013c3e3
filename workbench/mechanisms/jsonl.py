"""Reading and writing JSON Lines files."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from workbench.mechanisms.files import read_text

__all__ = ["jsonl_lines", "write_jsonl"]


def jsonl_lines(path: Path) -> list[str]:
    """The lines of a JSONL file, split on newline only.

    Not ``str.splitlines()``: that also splits on U+2028, U+0085 and other Unicode line
    breaks, which JSON writers leave unescaped inside strings (``ensure_ascii=False``), so
    one record would come back as two broken halves.
    """
    return read_text(path).split("\n")


def write_jsonl(path: Path, rows: Iterable[dict]) -> int:
    """Write one JSON object per line, UTF-8 kept as is (the data files' format); returns
    how many rows were written."""
    lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in rows]
    path.write_text("".join(lines), encoding="utf-8")
    return len(lines)
