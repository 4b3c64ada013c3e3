"""Checks on a candidate before any work: can it be built from this model, and can the
engine on this device serve it? Each answer is a one-line error naming the config key."""

from __future__ import annotations

from pathlib import Path

from workbench.config.run_config import RunConfig
from workbench.mechanisms.digests import model_file_digests
from workbench.quantize.formats import (
    ServedFormat,
    format_of_candidate,
    format_of_checkpoint,
    group_size_problems,
    serve_args_for,
    unsupported_reason,
)

__all__ = ["candidate_problems", "model_file_problems", "serving_problem", "unsupported_here"]


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
    """Why the engine on this device cannot serve the candidate, or None when it can."""
    cand = cfg.candidate(name)
    fmt: ServedFormat | None
    if artifact is not None or cand.checkpoint is not None:
        path = artifact or cfg.resolve(cand.checkpoint or "")
        fmt = format_of_checkpoint(path, serve_args_for(path, cand.serve_args()))
    else:
        fmt = format_of_candidate(cand)
    return unsupported_reason(fmt, device) if fmt is not None else None


def serving_problem(cfg: RunConfig, name: str, device: str, artifact: Path | None = None
                    ) -> str | None:
    """The same, as a one-line error naming the config and the candidate."""
    reason = unsupported_here(cfg, name, device, artifact)
    return f"{cfg.source}: candidates.{name}: unsupported on {device}: {reason}" \
        if reason else None
