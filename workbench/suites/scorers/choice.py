"""Multiple choice by log-likelihood, and the calibration of the answer probabilities.

Each choice is a text continuation of the prompt (" A", " yes", ...). The engine tokenizes
the prompt and each continuation, and scores all of them in one batched request through
its prompt log-probabilities; a choice's score is the sum of its continuation tokens'
log-probabilities. The softmax over the choices is the model's answer distribution, whose
calibration (expected calibration error) quantisation can shift while accuracy holds.
This follows lm-eval's log-likelihood multiple choice; it is done here, not through lm-eval,
so that the items, ids, slices and per-item records are the workbench's own (docs/benchmarks.md:
lm-eval's API backends need local task YAMLs and record no per-request latency).
"""

from __future__ import annotations

import asyncio
import math

import httpx

from workbench.suites.engine_logprobs import prompt_logprobs, tokenize

__all__ = ["choice_logprobs", "expected_calibration_error", "pick_choice", "softmax"]


def softmax(scores: list[float]) -> list[float]:
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    return [e / sum(exps) for e in exps]


def pick_choice(scores: list[float], choices: tuple[str, ...], normalise: str
                ) -> tuple[int, list[float]]:
    """The model's answer and its answer distribution. normalise "characters" is lm-eval's
    acc_norm (lm_eval/api/task.py): answer texts of different lengths carry different
    numbers of tokens, hence lower sums for longer ones, so each sum is divided by the
    text's characters (the delimiter space not counted, as lm-eval counts them)."""
    if normalise == "characters":
        scores = [s / max(len(c.removeprefix(" ")), 1)
                  for s, c in zip(scores, choices, strict=True)]
    probs = softmax(scores)
    return max(range(len(probs)), key=probs.__getitem__), probs


async def choice_logprobs(client: httpx.AsyncClient, model: str, prompt: str,
                          choices: tuple[str, ...], seed: int) -> list[float]:
    """Sum of log P(continuation token | everything before it), per choice."""
    context, *continuations = await asyncio.gather(
        tokenize(client, model, prompt), *(tokenize(client, model, c, False) for c in choices))
    scored = await prompt_logprobs(client, model, [context + c for c in continuations], 1, seed)
    # position i of a result predicts token i + 1; the continuation starts at len(context)
    return [sum(float(pos[str(t)]["logprob"])
                for pos, t in zip(positions[len(context) - 1:], cont, strict=True))
            for cont, positions in zip(continuations, scored, strict=True)]


def expected_calibration_error(confidence: list[float], correct: list[float],
                               bins: int = 10) -> float:
    """Equal-width bins over [0, 1]: sum over bins of (share of items) x |accuracy -
    mean confidence|."""
    total, ece = len(confidence), 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        members = [i for i, c in enumerate(confidence) if lo < c <= hi or (b == 0 and c == 0)]
        if members:
            acc = sum(correct[i] for i in members) / len(members)
            conf = sum(confidence[i] for i in members) / len(members)
            ece += len(members) / total * abs(acc - conf)
    return ece
