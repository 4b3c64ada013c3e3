"""Compare & gate: pair baseline and candidate item by item, then judge every gate.

Quality uses a paired bootstrap interval of the accuracy difference (scipy.stats.bootstrap
on the per-item differences) and an exact McNemar test of the discordant pairs
(scipy.stats.binomtest). A gate whose metric is missing fails: the policy fails closed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np
from scipy import stats

from .evaluate.runner import SuiteResult
from .gates import LATENCY_METRICS, GatePolicy, LatencyGate, MemoryGate, QualityGate
from .loadtest import LevelResult, LoadResult

__all__ = ["GateOutcome", "PairedDelta", "count_flips", "decide", "evaluate_gates",
           "paired_delta", "paired_scores"]

Status = Literal["pass", "fail", "inconclusive", "not_applicable"]


@dataclass(frozen=True)
class PairedDelta:
    """Candidate minus baseline on the items both answered."""

    n: int
    baseline: float
    candidate: float
    delta: float
    ci_low: float
    ci_high: float
    flips_to_wrong: int  # right in baseline, wrong in candidate
    flips_to_right: int
    mcnemar_p: float


@dataclass(frozen=True)
class GateOutcome:
    gate: str
    status: Status
    detail: str
    threshold: float | None = None
    value: float | None = None
    evidence: dict = field(default_factory=dict)


def count_flips(base: np.ndarray, cand: np.ndarray) -> tuple[int, int]:
    """(right -> wrong, wrong -> right) over paired 0/1 scores."""
    return int(np.sum((base == 1) & (cand == 0))), int(np.sum((base == 0) & (cand == 1)))


def paired_delta(base: list[float], cand: list[float], confidence: float, resamples: int,
                 seed: int) -> PairedDelta:
    b, c = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    d = c - b
    if np.all(d == d[0]):  # every pair moved alike: the interval is that point
        low = high = float(d[0])
    else:
        res = stats.bootstrap((d,), np.mean, confidence_level=confidence, n_resamples=resamples,
                              method="percentile", random_state=np.random.default_rng(seed))
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    to_wrong, to_right = count_flips(b, c)
    discordant = to_wrong + to_right
    p = stats.binomtest(to_right, discordant, 0.5).pvalue if discordant else 1.0
    return PairedDelta(n=len(d), baseline=float(b.mean()), candidate=float(c.mean()),
                       delta=float(d.mean()), ci_low=low, ci_high=high,
                       flips_to_wrong=to_wrong, flips_to_right=to_right, mcnemar_p=float(p))


def non_inferiority(delta: PairedDelta, margin: float) -> Status:
    if delta.ci_low >= -margin:
        return "pass"
    if delta.ci_high < -margin:
        return "fail"
    return "inconclusive"


def paired_scores(base: SuiteResult, cand: SuiteResult, slice_name: str | None = None
                  ) -> tuple[list[float], list[float]]:
    """Both runs' scores on the items both answered (in a slice, if named), by id."""
    b = {i.id: i for i in base.items if slice_name is None or slice_name in i.slices}
    c = {i.id: i for i in cand.items if slice_name is None or slice_name in i.slices}
    common = sorted(b.keys() & c.keys())
    return [b[k].score for k in common], [c[k].score for k in common]


def _quality_outcomes(gate: QualityGate, base: SuiteResult | None, cand: SuiteResult | None,
                      policy: GatePolicy, seed: int) -> list[GateOutcome]:
    name = f"quality:{gate.suite}"
    if base is None or cand is None:
        return [GateOutcome(name, "fail", "suite results missing (fail closed)")]
    checks: list[tuple[str, str | None, float]] = [(name, None, gate.max_drop)]
    if gate.slice_max_drop is not None:
        for s, info in base.slices.items():
            if info["n"] >= gate.min_slice_items:
                checks.append((f"{name}[{s}]", s, gate.slice_max_drop))
    outcomes = []
    for label, slice_name, margin in checks:
        b, c = paired_scores(base, cand, slice_name)
        if not b:
            outcomes.append(GateOutcome(label, "fail", "no paired items (fail closed)"))
            continue
        d = paired_delta(b, c, policy.confidence, policy.bootstrap_resamples, seed)
        status = non_inferiority(d, margin)
        detail = (f"accuracy {d.baseline:.3f} -> {d.candidate:.3f}, delta {d.delta:+.3f} "
                  f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}] vs margin -{margin:.3f}; "
                  f"flips {d.flips_to_wrong} lost / {d.flips_to_right} gained, "
                  f"McNemar p={d.mcnemar_p:.3g}, n={d.n}")
        outcomes.append(GateOutcome(label, status, detail, -margin, d.delta, asdict(d)))
    return outcomes


def _level_value(level: LevelResult, metric: str) -> float:
    attr, stat = LATENCY_METRICS[metric]
    value = getattr(level, attr)
    # a figure the level lacks (no SLO declared) is NaN: every comparison with it fails
    return float(value.get(stat, math.nan) if stat else value)


def _ratio(base: float, cand: float) -> float:
    if math.isnan(base) or math.isnan(cand):
        return math.nan
    if base > 0:
        return cand / base
    return 1.0 if cand == base else math.inf


def _memory_outcome(gate: MemoryGate, base: dict, cand: dict) -> GateOutcome:
    bound = "max" if gate.max_ratio is not None else "min"
    limit = float(gate.max_ratio if gate.max_ratio is not None else gate.min_ratio or 0)
    name = f"memory:{gate.metric}:{bound}_ratio"
    bv, cv = float(base.get(gate.metric) or math.nan), float(cand.get(gate.metric) or math.nan)
    ratio = _ratio(bv, cv)
    if math.isnan(ratio):
        return GateOutcome(name, "fail", f"{gate.metric} not measured (fail closed)")
    ok = ratio <= limit if bound == "max" else ratio >= limit
    return GateOutcome(name, "pass" if ok else "fail",
                       f"{gate.metric} {bv:.0f} -> {cv:.0f}, ratio {ratio:.3f} ({bound} {limit})",
                       limit, ratio, {"baseline": bv, "candidate": cv})


def _latency_outcomes(gate: LatencyGate, base: LoadResult | None, cand: LoadResult | None,
                      device: str) -> list[GateOutcome]:
    bound = "max" if gate.max_ratio is not None else "min"
    limit = float(gate.max_ratio if gate.max_ratio is not None else gate.min_ratio or 0)
    name = f"latency:{gate.metric}:{bound}_ratio"
    if device not in gate.devices:
        return [GateOutcome(name, "not_applicable",
                            f"judges {', '.join(gate.devices)} measurements; this run is {device}")]
    if base is None or cand is None or not base.levels:
        return [GateOutcome(name, "fail", "load-test results missing (fail closed)")]
    outcomes = []
    for blevel in base.levels:
        label = f"{name}@{blevel.key}"
        clevel = cand.level(blevel.key)
        if clevel is None:
            outcomes.append(GateOutcome(label, "fail", "candidate level missing (fail closed)"))
            continue
        bv, cv = _level_value(blevel, gate.metric), _level_value(clevel, gate.metric)
        ratio = _ratio(bv, cv)
        ok = ratio <= limit if bound == "max" else ratio >= limit
        detail = f"{gate.metric} {bv:.2f} -> {cv:.2f}, ratio {ratio:.3f} ({bound} {limit})"
        outcomes.append(GateOutcome(label, "pass" if ok else "fail", detail, limit, ratio,
                                    {"baseline": bv, "candidate": cv}))
    return outcomes


def evaluate_gates(policy: GatePolicy, base_suites: dict[str, SuiteResult],
                   cand_suites: dict[str, SuiteResult], base_load: LoadResult | None,
                   cand_load: LoadResult | None, device: str, seed: int,
                   base_headroom: dict | None = None, cand_headroom: dict | None = None
                   ) -> list[GateOutcome]:
    outcomes: list[GateOutcome] = []
    for q in policy.quality:
        outcomes += _quality_outcomes(q, base_suites.get(q.suite), cand_suites.get(q.suite),
                                      policy, seed)
    for lat in policy.latency:
        outcomes += _latency_outcomes(lat, base_load, cand_load, device)
    for mem in policy.memory:
        outcomes.append(_memory_outcome(mem, base_headroom or {}, cand_headroom or {}))
    return outcomes


def decide(outcomes: list[GateOutcome]) -> Literal["promote", "reject", "inconclusive"]:
    """Reject on any failure; promote only when every applicable gate passed."""
    judged = [o for o in outcomes if o.status != "not_applicable"]
    if not judged or any(o.status == "fail" for o in judged):
        return "reject"
    if any(o.status == "inconclusive" for o in judged):
        return "inconclusive"
    return "promote"
