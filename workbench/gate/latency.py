"""Latency and throughput ratios of candidate to baseline, with their intervals.

Two kinds of interval (docs/gates.md): with several engine sessions per model, a Student-t
interval of the log ratio from one figure per session, which carries the variance between
sessions; with one session each, a percentile bootstrap over the two levels' per-request
data, which does not.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Literal

import numpy as np

from workbench.config.gate_policy import LATENCY_METRICS, GatePolicy, LatencyGate
from workbench.gate.evidence import Evidence, GateId, GateOutcome
from workbench.loadtest.results import LevelResult, LoadResult, per_request_ms

__all__ = ["MIN_TAIL", "Judgement", "latency_gate_id", "latency_judgement", "latency_outcomes",
           "level_value", "ratio", "ratio_interval", "round_values", "session_ratio_interval",
           "wider_than_margin", "within_session_interval"]

Judgement = Literal["pass", "fail", "inconclusive"]


def level_value(level: LevelResult, metric: str) -> float:
    attr, stat = LATENCY_METRICS[metric]
    value = getattr(level, attr)
    # a figure the level lacks (no SLO declared) is NaN: every comparison with it fails
    return float(value.get(stat, math.nan) if stat else value)


def ratio(base: float, cand: float) -> float:
    if math.isnan(base) or math.isnan(cand):
        return math.nan
    if base > 0:
        return cand / base
    return 1.0 if cand == base else math.inf


MIN_TAIL = 5  # requests beyond a percentile needed to bootstrap its ratio


def ratio_interval(base: np.ndarray, cand: np.ndarray, percentile: float, confidence: float,
                   resamples: int, seed: int) -> tuple[float, float]:
    """Percentile-bootstrap interval of percentile(cand) / percentile(base), the requests of
    each model resampled on their own (they are different requests, not pairs)."""
    from scipy import stats  # 0.8 s to import: loaded when judging (docs/architecture.md)

    def ratio(b: np.ndarray, c: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.percentile(c, percentile, axis=axis) / np.percentile(b, percentile, axis=axis)

    res = stats.bootstrap((base, cand), ratio, confidence_level=confidence,
                          n_resamples=resamples, method="percentile", paired=False,
                          vectorized=True, random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def latency_judgement(value: float, interval: tuple[float, float] | None, limit: float,
                       bound: str) -> Judgement:
    """By the interval when there is one (inside the limit: pass; wholly outside: fail;
    across it: inconclusive), else by the point ratio."""
    if math.isnan(value):
        return "fail"
    if interval is None:
        return "pass" if (value <= limit if bound == "max" else value >= limit) else "fail"
    low, high = interval
    if bound == "max":
        return "pass" if high <= limit else "fail" if low > limit else "inconclusive"
    return "pass" if low >= limit else "fail" if high < limit else "inconclusive"


def round_values(load: LoadResult, key: str, metric: str) -> list[float]:
    """The metric at one level in each engine session the model was load-tested in."""
    return [level_value(lv, metric) for r in load.all_rounds()
            if (lv := r.level(key)) is not None]


def session_ratio_interval(base: list[float], cand: list[float], confidence: float
                           ) -> tuple[float, tuple[float, float]] | None:
    """(ratio, interval) of candidate / baseline from one figure per engine session.

    Each session's figure already carries its within-session noise, so the spread of the
    sessions' log figures around their model's mean estimates the whole variance, between
    sessions included; both models' spreads are pooled (the same engine, machine and
    workload) and the log ratio's interval is Student's t with n_b + n_c - 2 degrees of
    freedom: exact for log-normal session figures, and wide when sessions are few, as it
    should be. Written here: scipy.stats.ttest_ind gives the test, not this interval of a
    difference on the log scale. None when a figure is not positive (no log)."""
    from scipy import stats  # 0.8 s to import: loaded when judging (docs/architecture.md)

    if min(base + cand) <= 0 or any(math.isnan(v) for v in base + cand):
        return None
    lb, lc = np.log(base), np.log(cand)
    df = len(lb) + len(lc) - 2
    pooled = (np.sum((lb - lb.mean()) ** 2) + np.sum((lc - lc.mean()) ** 2)) / df
    se = math.sqrt(pooled * (1 / len(lb) + 1 / len(lc)))
    diff = float(lc.mean() - lb.mean())
    half = float(stats.t.ppf(1 - (1 - confidence) / 2, df)) * se
    return math.exp(diff), (math.exp(diff - half), math.exp(diff + half))


def within_session_interval(metric: str, raw_dirs: tuple[Path, Path] | None,
                            blevel: LevelResult, clevel: LevelResult, confidence: float,
                            resamples: int, seed: int) -> tuple[float, float] | None:
    """The ratio's interval from both levels' per-request data, when the metric is a
    per-request percentile and the raw files are at hand; else None."""
    attr, stat = LATENCY_METRICS[metric]
    if not stat or not stat.startswith("p") or raw_dirs is None:
        return None
    raws = [raw_dirs[i] / Path(lv.raw_file).name for i, lv in enumerate((blevel, clevel))]
    if not all(r.is_file() for r in raws):
        return None
    b, c = (per_request_ms(json.loads(r.read_text()), attr.removesuffix("_ms")) for r in raws)
    q = float(stat[1:])
    # A bootstrap cannot see past the sample's extremes: with fewer than MIN_TAIL requests
    # beyond the percentile (p99 of 16 requests: none) its interval is falsely narrow.
    if min(len(b), len(c)) * (100 - q) / 100 < MIN_TAIL or not (b > 0).all():
        return None
    return ratio_interval(b, c, q, confidence, resamples, seed)


def latency_gate_id(gate: LatencyGate) -> GateId:
    """The gate's name before any level or load profile."""
    return GateId("latency", gate.metric,
                  check="max_ratio" if gate.max_ratio is not None else "min_ratio")


def latency_outcomes(gate: LatencyGate, ev: Evidence, policy: GatePolicy, seed: int
                      ) -> list[GateOutcome]:
    from scipy import stats  # 0.8 s to import: loaded when judging (docs/architecture.md)

    bound = "max" if gate.max_ratio is not None else "min"
    limit = float(gate.max_ratio if gate.max_ratio is not None else gate.min_ratio or 0)
    name = latency_gate_id(gate)
    base, cand = ev.base_load, ev.cand_load
    if ev.device not in gate.devices:
        return [GateOutcome.of(name, "not_applicable", f"judges {', '.join(gate.devices)} "
                            f"measurements; this run is {ev.device}")]
    if base is None or cand is None or not base.levels:
        return [GateOutcome.of(name, "fail", "load-test results missing (fail closed)",
                               informational=gate.informational)]
    outcomes = []
    for blevel in base.levels:
        label = dataclasses.replace(name, level=blevel.key)
        clevel = cand.level(blevel.key)
        if clevel is None:
            outcomes.append(GateOutcome.of(label, "fail", "candidate level missing (fail closed)",
                                           informational=gate.informational))
            continue
        bv, cv = level_value(blevel, gate.metric), level_value(clevel, gate.metric)
        value = ratio(bv, cv)
        rounds = round_values(base, blevel.key, gate.metric), \
            round_values(cand, blevel.key, gate.metric)
        between = session_ratio_interval(*rounds, policy.confidence) \
            if min(len(rounds[0]), len(rounds[1])) > 1 else None
        interval: tuple[float, float] | None
        if between is not None:
            value, interval = between
            bv, cv = (float(stats.gmean(r)) for r in rounds)  # what the ratio compares
            shown = (f" [{interval[0]:.3f}, {interval[1]:.3f}] over {len(rounds[0])} + "
                     f"{len(rounds[1])} engine sessions (between-session t interval)")
        else:
            interval = within_session_interval(gate.metric, ev.raw_dirs, blevel, clevel,
                                               policy.confidence, policy.bootstrap_resamples,
                                               seed)
            shown = (f" [{interval[0]:.3f}, {interval[1]:.3f}] within one session each: "
                     "the variance between sessions is not in it" if interval else
                     " (point: no interval from this few requests)")
        status = latency_judgement(value, interval, limit, bound)
        detail = (f"{gate.metric} {bv:.2f} -> {cv:.2f}, ratio {value:.3f}{shown} "
                  f"({bound} {limit})")
        if status == "pass" and interval is not None and wider_than_margin(interval, limit,
                                                                           bound):
            status = "inconclusive"
            detail += ("; the interval is wider than the way from 1.0 to the limit: it "
                       "cannot tell an unchanged candidate from one at its margin")
        outcomes.append(GateOutcome.of(label, status, detail, limit, value, {
            "baseline": bv, "candidate": cv,
            "ratio_interval": list(interval) if interval else None,
            "baseline_rounds": rounds[0], "candidate_rounds": rounds[1]},
            informational=gate.informational))
    return outcomes


def wider_than_margin(interval: tuple[float, float], limit: float, bound: str) -> bool:
    """A ratio gate with room on the far side of 1.0 (max_ratio 2.0: "at most twice as
    slow") decides only with an interval narrower than that room: one spanning more than
    1.0 to 2.0 could come from an unchanged candidate or from one at the margin, and a pass
    it gives is no evidence (docs/gates.md, "Latency"). A limit asking for a speed-up
    (max_ratio 1.0) has no such room: its interval must simply lie beyond it."""
    room = limit if bound == "max" else 1 / limit
    low, high = interval
    return room > 1 and low > 0 and high / low > room
