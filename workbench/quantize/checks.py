"""Checks on a candidate before any work: can it be built from this model, and can the
engine on this device serve it? Each answer is a one-line error naming the config key."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path

from workbench.config.run_config import RunConfig
from workbench.mechanisms.digests import model_file_digests
from workbench.mechanisms.gpu import lowest_capability, this_host
from workbench.mechanisms.paths import offline_env, quant_python
from workbench.quantize.formats import (
    ServedFormat,
    dense_reason,
    format_of_candidate,
    format_of_checkpoint,
    group_size_problems,
    serve_args_for,
    unsupported_reason,
)
from workbench.quantize.gpu_rules import Capability

__all__ = ["candidate_problems", "gpu_capability", "model_file_problems", "quantiser_device",
           "quantiser_device_problem", "serving_problem", "unsupported_here"]


def _largest_dividing_power_of_two(model_dir: Path, upto: int) -> int:
    g = upto
    while g > 1 and group_size_problems(model_dir, g):
        g //= 2
    return g


def candidate_problems(cfg: RunConfig, name: str, model_dir: Path) -> list[str]:
    """What makes a candidate impossible to build from this model (exit 2 before any work)."""
    cand = cfg.candidate(name)
    where = f"{cfg.source}: candidates.{name}"
    problems = []
    group = cand.resolved_group_size
    if group and (model_dir / "config.json").is_file():
        ragged = group_size_problems(model_dir, group)
        if ragged:
            fits = _largest_dividing_power_of_two(model_dir, group)
            problems.append(f"{where}.group_size: {group} does not divide {'; '.join(ragged)} "
                            f"of {model_dir.name}; use a power of two that divides them all "
                            f"(largest: {fits})")
    if cand.recipe_file is not None and not cfg.resolve(cand.recipe_file).is_file():
        problems.append(f"{where}.recipe_file: {cfg.resolve(cand.recipe_file)} not found")
    if cand.checkpoint is not None and not (cfg.resolve(cand.checkpoint) / "config.json"
                                            ).is_file():
        problems.append(f"{where}.checkpoint: {cfg.resolve(cand.checkpoint)} is not a model "
                        "folder (no config.json)")
    elif cand.checkpoint is not None:
        problems += model_file_problems(where, model_dir, cfg.resolve(cand.checkpoint))
    return problems


def model_file_problems(where: str, model_dir: Path, checkpoint: Path) -> list[str]:
    """A ready checkpoint must ask and answer like its baseline: the same chat template,
    tokenizer and generation defaults (only the weights may differ; docs/gates.md, "Only
    the candidate differs"). Seen up front, so refused before anything is measured."""
    base, cand = model_file_digests(model_dir), model_file_digests(checkpoint)
    return [f"{where}.checkpoint: its {what.replace('_', ' ')} differs from the baseline's "
            f"({checkpoint} vs {model_dir}); only the weights may differ — copy the "
            f"baseline's {FILES[what]} into the checkpoint"
            for what in base if base[what] != cand[what]]


FILES = {"chat_template": "chat template (tokenizer_config.json, chat_template.jinja)",
         "tokenizer": "tokenizer files", "generation_config": "generation_config.json"}


def unsupported_here(cfg: RunConfig, name: str, device: str, artifact: Path | None = None
                     ) -> str | None:
    """Why the candidate cannot be served on this device, or None when it can: a built
    weight-only int4 candidate the engine has no kernel for is served dense here
    (formats.dense_reason); a ready checkpoint is served as it is or refused."""
    cand = cfg.candidate(name)
    fmt: ServedFormat | None
    if artifact is not None or cand.checkpoint is not None:
        path = artifact or cfg.resolve(cand.checkpoint or "")
        fmt = format_of_checkpoint(path, serve_args_for(path, cand.serve_args()))
    else:
        fmt = format_of_candidate(cand)
    if fmt is None or (cand.checkpoint is None and dense_reason(fmt, device)):
        return None
    return unsupported_reason(fmt, device, capability=gpu_capability(device))


def gpu_capability(device: str) -> Capability | None:
    """The visible GPUs' lowest compute capability on a CUDA device (None elsewhere, or
    when NVML cannot say: the capability rules then record that they were not checked)."""
    return lowest_capability(this_host()) if device == "cuda" else None


def serving_problem(cfg: RunConfig, name: str, device: str, artifact: Path | None = None
                    ) -> str | None:
    """The same, as a one-line error naming the config and the candidate."""
    reason = unsupported_here(cfg, name, device, artifact)
    return f"{cfg.source}: candidates.{name}: unsupported on {device}: {reason}" \
        if reason else None


# What the quantiser environment's torch reports, asked in that environment (its torch is
# not the engine's: docs/environments.md).
_PROBE = ("import json, torch; print(json.dumps({'cuda': torch.cuda.is_available(), "
          "'torch': torch.__version__}))")


@functools.cache
def _quantiser_torch(python: Path) -> dict | str:
    """{'cuda': bool, 'torch': version} from the quantiser's python, or why it did not
    answer; asked once per process (a torch import takes seconds)."""
    try:
        done = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True,
                              env=offline_env(), timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{type(err).__name__}: {err}"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    answer: dict = json.loads(lines[-1])
    return answer


def quantiser_device_problem(device: str) -> str | None:
    """Why the quantiser cannot calibrate on the engine's `device`, as one line, or None:
    an engine on cuda with a quantiser whose torch sees no CUDA device would have
    llm-compressor compress on the CPU for hours (llmcompressor/utils/dev.py,
    get_main_device). Costs a subprocess only when device is cuda, once per process; a
    missing quantiser environment is left to the check that names it (None here)."""
    if device != "cuda" or not quant_python().exists():
        return None
    answer = _quantiser_torch(quant_python())
    if isinstance(answer, str):
        return f"the engine serves on cuda but the quantiser's torch ({quant_python()}) " \
               f"did not say whether it sees one: {answer[:200]}"
    if answer["cuda"]:
        return None
    return (f"the engine serves on cuda but the quantiser's torch {answer['torch']} sees no "
            f"CUDA device ({quant_python()}); rebuild the quantiser environment with "
            "scripts/setup.sh on this host")


def quantiser_device() -> str:
    """Where the quantiser will calibrate when nothing is expected of it: 'cuda' when its
    torch sees a CUDA device, else 'cpu' (without asking where no NVIDIA driver is
    installed: its nvidia-smi comes with it)."""
    if not quant_python().exists() or shutil.which("nvidia-smi") is None:
        return "cpu"
    answer = _quantiser_torch(quant_python())
    return "cuda" if isinstance(answer, dict) and answer["cuda"] else "cpu"
