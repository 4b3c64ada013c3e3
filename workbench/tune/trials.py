"""A trial: the rejected candidate's recipe with its k most sensitive blocks kept in
16-bit, as an ordinary candidate that evaluate's stages build, cache and judge."""

from __future__ import annotations

from workbench.config.run_config import Candidate, RunConfig
from workbench.quantize.sensitivity import Sensitivity, keep_blocks_ignore

__all__ = ["trial_candidate", "trial_config", "trial_name"]


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


def trial_config(cfg: RunConfig, name: str, sensitivity: Sensitivity, kept: int
                 ) -> tuple[RunConfig, str]:
    """The run's config with the trial among its candidates, and the trial's name."""
    trial = trial_name(name, kept)
    cand = trial_candidate(cfg.candidates[name], sensitivity, kept)
    return cfg.model_copy(update={"candidates": {**cfg.candidates, trial: cand}}), trial
