"""A trial: an ordinary candidate that evaluate's stages build, cache and judge. Either the
candidate's recipe with its k most sensitive blocks kept in 16-bit (the keep-k search), or
a point of the config's `tune.space` (tune/space.py)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.config.run_config import Candidate, RunConfig
from workbench.quantize.sensitivity import Sensitivity, keep_blocks_ignore
from workbench.tune.space import SpacePoint

__all__ = ["TrialSpec", "keep_spec", "point_spec", "trial_candidate", "trial_config",
           "trial_name"]


def trial_name(name: str, kept: int) -> str:
    """k = 0 is the candidate as the config states it, under its own name, so that its
    measurement beside the baseline (cached by an evaluate or a sweep) is found again."""
    return name if kept == 0 else f"{name}-keep{kept}"


def trial_candidate(cand: Candidate, sensitivity: Sensitivity, kept: int) -> Candidate:
    """The candidate with the `kept` blocks ranked most sensitive left unquantised (an
    `ignore` entry llm-compressor reads; k = 0 is the candidate itself). The artifact's
    key digests the recipe, so each trial is built once and cached by its content."""
    entry = keep_blocks_ignore(sensitivity.ranked()[:kept])
    if entry is None:
        return cand
    return cand.model_copy(update={"ignore": [*cand.ignore, entry]})


@dataclass(frozen=True)
class TrialSpec:
    """One trial as the search runs it: its name, its candidate, the decoder blocks it
    leaves in 16-bit, and its recipe in words."""

    name: str
    candidate: Candidate
    kept: tuple[int, ...]
    label: str
    weight_bytes: int | None = None  # a space's point: its estimated size, the walk's order


def keep_spec(name: str, cand: Candidate, sensitivity: Sensitivity, kept: int) -> TrialSpec:
    """The trial that keeps the `kept` most sensitive blocks of the candidate as stated."""
    blocks = tuple(sensitivity.ranked()[:kept])
    return TrialSpec(trial_name(name, kept), trial_candidate(cand, sensitivity, kept), blocks,
                     f"blocks {list(blocks)} kept in 16-bit" if blocks
                     else "the recipe as stated")


def point_spec(point: SpacePoint) -> TrialSpec:
    return TrialSpec(point.name, point.candidate, point.kept, point.label, point.weight_bytes)


def trial_config(cfg: RunConfig, spec: TrialSpec) -> RunConfig:
    """The run's config with the trial among its candidates."""
    return cfg.model_copy(update={"candidates": {**cfg.candidates, spec.name: spec.candidate}})
