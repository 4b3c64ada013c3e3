"""matplotlib on demand: pyplot on the file-only backend, imported when a plot is drawn.

Importing it costs about a third of a second, which `workbench --help` and `validate` need
not pay (docs/architecture.md: heavy libraries are imported where they are used).
"""

from __future__ import annotations

from typing import Any

__all__ = ["pyplot"]


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI runners or servers
    import matplotlib.pyplot as plt

    return plt
