"""A suite's results, item by item and summed up: what each item answered and scored (with
its generation health and checks), and the suite's accuracy, slices and metrics.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workbench.suites.definition import Suite
from workbench.suites.scorers.choice import expected_calibration_error

__all__ = ["ITEM_CHECKS", "SCORING_VERSION", "ItemResult", "SuiteResult", "check_means",
           "score_response", "summarise", "without_answers"]

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


# Part of the baseline cache key: bump whenever score_response changes meaning, so cached
# results scored the old way are not compared with new ones. 7: a sampled traffic request
# is drawn its n times (a cached baseline drew it once).
SCORING_VERSION = 7


# The per-item checks each scoring records beside the score: what a gate's `metric` may name
# (generating scorings also record healthy and truncated).
ITEM_CHECKS = {"refusal": ("refused", "off_topic"),
               "json": ("parses", "schema_valid", "fields_correct"),
               "instructions": ("instructions_followed",),
               # a traffic request's answer held against the baseline's (gate/traffic.py)
               # higher is better in each (a gate holds a drop): not `refused` or
               # `judge_no_verdict`, whose rise is the loss (refusal_kept, judge_as_good)
               "agreement": ("agreement_chrf", "agreement_exact", "length_kept",
                             "refusal_kept", "schema_valid", "judge_as_good",
                             "baseline_answer_likelihood")}


@dataclass(frozen=True)
class ItemResult:
    id: str
    slices: tuple[str, ...]
    prompt_sha256: str
    response: str
    score: float
    latency_s: float
    completion_tokens: int
    choice_probs: tuple[float, ...] = ()  # scoring 'choice': the answer distribution
    detail: str = ""  # scoring 'code': passed | failed: <last error line> | timeout
    # Named sub-scores, averaged per suite into its metrics: refused (safety), parses /
    # schema_valid / fields_correct (structured), instructions_followed (instructions);
    # healthy and truncated on every generated response (health.py).
    checks: dict[str, float] = field(default_factory=dict)
    health: str = ""  # generated text: "ok" or why it is degenerate; "" not generated
    # a sampled traffic request's second draw, on the baseline's side (another seed): how
    # far its own draws agree is what the candidate's draw is held to (gate/traffic.py)
    redraw: str | None = None
    # a sampled traffic request asking for n > 1 answers: the draws after the first, each
    # with the next seed, on both sides; and on the baseline's, its redraws after the first
    draws: tuple[str, ...] = ()
    redraws: tuple[str, ...] = ()


@dataclass(frozen=True)
class SuiteResult:
    suite: str
    version: str
    digest: str
    n: int
    accuracy: float
    slices: dict[str, dict[str, float]]  # slice -> {"n": ..., "accuracy" | "perplexity": ...}
    items_file: str
    items: list[ItemResult] = field(repr=False)
    kind: str = "quality"
    metrics: dict[str, float] = field(default_factory=dict)  # fidelity: perplexity, tokens
    generates: bool = False  # its items are generated text (and carry a health check)
    # the suite's wall time on its engine (0.0: measured before it was recorded); what a
    # second look would cost is priced from it (pipeline/look_cost.py)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SuiteResult:
        items = [ItemResult(**{**i, "slices": tuple(i["slices"]), "checks": i.get("checks", {}),
                               "choice_probs": tuple(i.get("choice_probs", ())),
                               "draws": tuple(i.get("draws", ())),
                               "redraws": tuple(i.get("redraws", ()))})
                 for i in data["items"]]
        if "generates" not in data:  # recorded before health checks: text, not choices
            data = {**data, "generates": data.get("kind") != "fidelity"
                    and not any(i.choice_probs for i in items)}
        return cls(**{**data, "items": items})


def without_answers(row: dict, key: bytes) -> dict:
    """An item as a copy shared beyond this machine holds it where its suite keeps no
    responses (store_responses: false): each answer's HMAC-SHA256 under this machine's key
    and its length, not its text; a code item's detail cut to its verdict (a failure's line
    may quote the answer)."""
    out = dict(row)
    for field_name in ("response", "redraw"):
        text = out.pop(field_name, None)
        if isinstance(text, str):
            out[f"{field_name}_hmac"] = _hmac(key, text)
            out[f"{field_name}_chars"] = len(text)
    for field_name in ("draws", "redraws"):  # a request's further draws, each alike
        texts = out.pop(field_name, None) or []
        if texts:
            out[f"{field_name}_hmac"] = [_hmac(key, t) for t in texts]
            out[f"{field_name}_chars"] = [len(t) for t in texts]
    if isinstance(out.get("detail"), str):
        out["detail"] = out["detail"].split(":", 1)[0]
    return out


def _hmac(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def score_response(scoring: str, response: str, answer: str) -> float:
    """1.0 when the response carries the answer, else 0.0.

    numeric: the final number in the response (so "7 + 5 = 12" counts as 12).
    """
    if scoring == "numeric":
        numbers = _NUMBER.findall(response.replace(",", ""))
        return float(bool(numbers) and float(numbers[-1]) == float(answer))
    return float(response.strip() == answer.strip())


def _perplexity(items: list[ItemResult]) -> float:
    """Token-weighted: an item's score is its mean token log-probability over
    completion_tokens scored tokens."""
    tokens = sum(i.completion_tokens for i in items)
    return math.exp(-sum(i.score * i.completion_tokens for i in items) / max(tokens, 1))


_RATES = {"refused": "refusal_rate", "healthy": "health_rate", "truncated": "truncated_rate",
          "off_topic": "off_topic_rate"}


def check_means(items: list[ItemResult]) -> dict[str, float]:
    names = sorted({k for i in items for k in i.checks})
    means = {_RATES.get(k, k): sum(i.checks.get(k, 0.0) for i in items) / len(items)
             for k in names}
    if "health_rate" in means:
        means["degenerate_share"] = 1.0 - means["health_rate"]
    if "refusal_rate" in means and "health_rate" in means:
        # refusal behaviour judged on the answers that are text at all (docs/safety.md)
        healthy = [i for i in items if i.checks.get("healthy")]
        means["refusal_rate_healthy"] = (sum(i.checks.get("refused", 0.0) for i in healthy)
                                         / len(healthy)) if healthy else 0.0
    return means


def summarise(suite: Suite, items: list[ItemResult], items_file: Path,
              name: str | None = None) -> SuiteResult:
    by_slice: dict[str, list[ItemResult]] = defaultdict(list)
    for it in items:
        for s in it.slices:
            by_slice[s].append(it)
    fidelity = suite.spec.kind == "fidelity"
    slices = {s: {"n": len(v), "perplexity": _perplexity(v)} if fidelity else
              {"n": len(v), "accuracy": sum(i.score for i in v) / len(v)}
              for s, v in sorted(by_slice.items())}
    metrics = {"perplexity": _perplexity(items),
               "tokens": float(sum(i.completion_tokens for i in items))} if fidelity else {}
    if items and all(i.choice_probs for i in items):  # multiple choice, ours or lm-eval's
        confidence = [max(i.choice_probs) for i in items]
        metrics = {"ece": expected_calibration_error(confidence, [i.score for i in items]),
                   "mean_confidence": sum(confidence) / len(confidence)}
    if items and not fidelity:
        metrics |= check_means(items)
    return SuiteResult(
        suite=name or suite.name,
        version=suite.spec.version,
        digest=suite.digest,
        n=len(items),
        accuracy=0.0 if fidelity else sum(i.score for i in items) / len(items),
        slices=slices,
        items_file=str(items_file),
        items=sorted(items, key=lambda i: i.id),
        kind=suite.spec.kind,
        metrics=metrics,
        generates=suite.generates,
    )
