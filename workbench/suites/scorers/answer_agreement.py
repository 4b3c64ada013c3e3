"""One traffic request's two answers held against each other, with no reference (issue 49,
step 2's per-item measures): whether the candidate still answers as the baseline did.

Two kinds of measure, each computed once where its inputs are: what one side's answer is
on its own (answer_checks: the runner's, which knows the prompt) and how the candidate's
answer agrees with the baseline's (agreement: the judge's, which has both; the baseline held
against itself agrees by definition):
- agreement: equal after normalisation (Unicode NFKC, case, whitespace), and chrF, the
  character n-gram F-score of sacrebleu (Popović 2015; recall weighted twice, so an answer
  cut short loses more than one padded), of the normalised answers, on 0..1;
- generation health and refusal, by the workbench's own detectors (scorers/generation_health,
  scorers/refusal): a segment whose refusals rise *or* fall has changed;
- the answer's length over the baseline's (characters);
- where the request asked for JSON (a `json_schema` response format), validity against it.

A broken candidate gains nothing here: an empty, looping, garbage or off-topic answer
agrees with a real one neither exactly nor by chrF, fails health, and its length ratio
moves away from 1 in either direction.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jsonschema

from workbench.suites.scorers.generation_health import generation_health
from workbench.suites.scorers.refusal import is_refusal
from workbench.suites.scorers.structured import extract_json

__all__ = ["Agreement", "agreement", "answer_checks", "chrf", "normalise"]


def normalise(text: str) -> str:
    """The text as compared for exact agreement: NFKC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


@lru_cache(maxsize=1)
def _chrf_metric() -> Any:
    from sacrebleu.metrics import CHRF  # imported once, where a traffic suite is scored

    return CHRF()


def chrf(answer: str, reference: str) -> float:
    """sacrebleu's sentence-level chrF of `answer` against `reference`, both normalised
    first (case and spacing are not what a quantised model changes), on 0..1 (two empty
    texts agree: 1)."""
    answer, reference = normalise(answer), normalise(reference)
    if not answer and not reference:
        return 1.0
    return float(_chrf_metric().sentence_score(answer, [reference]).score) / 100.0


@dataclass(frozen=True)
class Agreement:
    """One answer held against the baseline's answer to the same request (the judge's:
    it needs both sides)."""

    exact: bool  # equal after normalise()
    chrf: float  # against the baseline's answer, 0..1
    length_ratio: float | None  # characters over the baseline's (None: the baseline's empty)


def agreement(answer: str, baseline_answer: str) -> Agreement:
    base_len = len(baseline_answer.strip())
    return Agreement(exact=normalise(answer) == normalise(baseline_answer),
                     chrf=round(chrf(answer, baseline_answer), 4),
                     length_ratio=round(len(answer.strip()) / base_len, 4) if base_len
                     else None)


def answer_checks(answer: str, prompt: str, schema: dict[str, Any] | None = None,
                  truncated: bool = False) -> tuple[dict[str, float], str]:
    """What one side's answer is on its own (the runner's, where the prompt is known):
    healthy and truncated, refused, and schema_valid where the request asked for a schema;
    with the health reason."""
    health = generation_health(answer, prompt, truncated)
    checks = {"healthy": float(health.healthy), "truncated": float(truncated),
              "refused": float(is_refusal(answer))}
    if schema is not None:
        checks["schema_valid"] = float(_valid(answer, schema))
    return checks, health.reason


def _valid(answer: str, schema: dict[str, Any]) -> bool:
    """The answer parses as JSON and meets the schema; a schema that cannot be used (a $ref
    to nowhere: suites/traffic.py refuses such files) is met by no answer."""
    from referencing.exceptions import Unresolvable

    parsed, value = extract_json(answer)
    try:
        return bool(parsed) and not any(
            jsonschema.Draft202012Validator(schema).iter_errors(value))
    except Unresolvable:
        return False
