"""Reading JSON Lines files."""

from __future__ import annotations

from pathlib import Path

__all__ = ["jsonl_lines"]


def jsonl_lines(path: Path) -> list[str]:
    """The lines of a JSONL file, split on newline only.

    Not ``str.splitlines()``: that also splits on U+2028, U+0085 and other Unicode line
    breaks, which JSON writers leave unescaped inside strings (``ensure_ascii=False``), so
    one record would come back as two broken halves.
    """
    return path.read_text(encoding="utf-8").split("\n")
