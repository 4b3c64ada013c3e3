"""Absolute floors and ceilings: a gate on one model's own rate (a suite's score, a per-item
check such as schema_valid or healthy, the share of requests within the SLO), judged on the
rate's interval rather than its point estimate (docs/gates.md, "Floors and ceilings").

A rate of 0/1 outcomes has an exact (Clopper-Pearson) interval, from scipy's binomtest; a
mean of fractional per-item scores (instructions followed, arguments matched) gets the
percentile bootstrap the paired gates use. Pass when the interval clears the bound, fail when
it lies wholly on the wrong side, inconclusive otherwise. Each bound's one-sided p-value of
"the rate meets it" is kept too, so that Holm's adjustment can bound false rejects across
every test a policy runs (gates.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from workbench.config.gate_policy import SLOGate
from workbench.gate.evidence import Evidence, GateId, GateOutcome
from workbench.gate.paired import (
    Comparisons,
    Status,
    bootstrap_means,
    clears_above,
    clears_below,
    item_value,
)
from workbench.loadtest.results import LevelResult, LoadResult
from workbench.suites.results import SuiteResult

__all__ = ["BASELINE_MISSES", "RateJudgement", "judge_rate", "rate_bound", "rate_interval",
           "slo_gate_id", "slo_outcome"]


def rate_interval(successes: int, n: int, confidence: float) -> tuple[float, float]:
    """Exact two-sided interval of a binomial rate (Clopper-Pearson)."""
    from scipy import stats  # 0.8 s to import: loaded when judging (docs/architecture.md)

    ci = stats.binomtest(successes, n).proportion_ci(confidence_level=confidence,
                                                     method="exact")
    return float(ci.low), float(ci.high)


def _p_meets(values: np.ndarray, binary: bool, bound: float, side: str) -> float:
    """One-sided p-value of H0 "the true rate meets the bound" (small: it does not)."""
    from scipy import stats  # 0.8 s to import: loaded when judging (docs/architecture.md)

    n, mean = len(values), float(values.mean())
    if binary:  # exact: how unlikely so few (or so many) successes are at the bound itself
        k = int(values.sum())
        tail = stats.binom.cdf(k, n, bound) if side == "min" else stats.binom.sf(k - 1, n, bound)
        return float(min(1.0, tail))
    se = float(values.std(ddof=1)) / math.sqrt(n) if n > 1 else 0.0
    if se == 0:  # every item alike: the bound is met or not, with certainty
        meets = mean >= bound if side == "min" else mean <= bound
        return 1.0 if meets else 0.0
    z = (mean - bound) / se
    return float(stats.norm.cdf(z) if side == "min" else stats.norm.sf(z))


@dataclass(frozen=True)
class RateJudgement:
    """One model's rate against one bound."""

    n: int
    rate: float
    low: float
    high: float
    status: Status
    p_meets: float  # one-sided p of "the rate meets the bound"; Holm reads it
    items_to_decide: int | None  # inconclusive: about how many more items would decide it

    def to_json(self) -> dict[str, float | int | str | None]:
        return {"n": self.n, "rate": self.rate, "ci_low": self.low, "ci_high": self.high,
                "status": self.status, "p_meets": self.p_meets,
                "items_to_decide": self.items_to_decide}

    def describe(self, bound: float, side: str) -> str:
        word = "min" if side == "min" else "max"
        text = (f"{self.rate:.3f} [{self.low:.3f}, {self.high:.3f}] of {self.n} vs "
                f"{word} {bound}")
        if self.items_to_decide is not None:
            text += f"; about {self.items_to_decide} more items would decide it"
        return text


def _items_to_decide(rate: float, n: int, bound: float, confidence: float) -> int | None:
    """Normal approximation: items at which an interval around the observed rate would
    no longer reach the bound (None when the rate sits on it: no n decides)."""
    from scipy import stats  # 0.8 s to import: loaded when judging (docs/architecture.md)

    distance = abs(rate - bound)
    if distance < 1e-9:
        return None
    z = float(stats.norm.ppf(1 - (1 - confidence) / 2))
    spread = max(rate * (1 - rate), 1 / n)
    return max(math.ceil(z * z * spread / distance ** 2) - n, 1)


def judge_rate(values: list[float], bound: float, side: str, confidence: float, seed: int
               ) -> RateJudgement:
    """Per-item values (0/1, or fractions in [0, 1]) against a floor (side "min") or a
    ceiling ("max") at the policy's two-sided confidence."""
    arr = np.asarray(values, dtype=float)
    n = len(arr)
    binary = bool(np.all((arr == 0) | (arr == 1)))
    low, high = (rate_interval(int(arr.sum()), n, confidence) if binary
                 else bootstrap_means(arr, confidence, 5000, seed)[:2])
    rate = float(arr.mean())
    if side == "min":
        status: Status = ("pass" if clears_above(low, bound) else
                          "fail" if clears_below(high, bound) else "inconclusive")
    else:
        status = ("pass" if clears_below(high, bound) else
                  "fail" if clears_above(low, bound) else "inconclusive")
    more = _items_to_decide(rate, n, bound, confidence) if status == "inconclusive" else None
    return RateJudgement(n, rate, low, high, status, _p_meets(arr, binary, bound, side), more)


def rate_bound(name: GateId, metric: str, bound: float, side: str, base: SuiteResult,
                cand: SuiteResult, compared: Comparisons) -> GateOutcome:
    """A floor or ceiling on the candidate's own rate, judged on its interval, and the
    baseline held to the same bound (floors.py; docs/gates.md)."""
    def rate(result: SuiteResult) -> RateJudgement | None:
        values = [v for i in result.items if (v := item_value(i, metric)) is not None]
        return judge_rate(values, bound, side, compared.confidence, compared.seed) \
            if values else None

    label = replace(name, check="floor" if side == "min" else "ceiling")
    c, b = rate(cand), rate(base)
    if c is None:
        return GateOutcome.of(label, "fail", f"no candidate items with {metric!r} (fail "
                              "closed)")
    detail = f"candidate {metric} {c.describe(bound, side)}"
    if b is not None:
        detail += f"; baseline {b.rate:.3f} [{b.low:.3f}, {b.high:.3f}]: {b.status}"
        if b.status != "pass":
            detail += f" ({BASELINE_MISSES[b.status]})"
    return GateOutcome.of(label, c.status, detail, bound, c.rate,
                          {"candidate": c.to_json(), "baseline": b.to_json() if b else None,
                           "p_fail": c.p_meets},
                          baseline_status=b.status if b else None)


# What a baseline that does not meet an absolute gate means for every candidate of it
BASELINE_MISSES = {
    "fail": "the baseline misses it: no candidate of this model can be expected to pass",
    "inconclusive": "the baseline itself cannot be shown to meet it at this n",
}


def _slo_level(load: LoadResult | None, key: str | None) -> LevelResult | None:
    levels = load.levels if load else []
    if key is None:
        return levels[-1] if levels else None
    return next((lv for lv in levels if lv.key == key), None)


def _attainment(level: LevelResult, bound: float, confidence: float, seed: int
                ) -> RateJudgement:
    """The share of the level's requests within the SLO, on its exact interval."""
    sent = level.completed + level.failed
    met = round(level.slo["attainment"] * sent)
    return judge_rate([1.0] * met + [0.0] * (sent - met), bound, "min", confidence, seed)


def slo_gate_id(gate: SLOGate) -> GateId:
    """The gate's name before its level is found and before any load profile."""
    return GateId("slo", level=gate.level or "heaviest")


def slo_outcome(gate: SLOGate, ev: Evidence, confidence: float, seed: int) -> GateOutcome:
    where = gate.level or "heaviest"
    name = slo_gate_id(gate)
    if ev.device not in gate.devices:
        return GateOutcome.of(name, "not_applicable", f"judges {', '.join(gate.devices)} "
                           f"measurements; this run is {ev.device}")
    level = _slo_level(ev.cand_load, gate.level)
    if level is None or not level.slo or level.completed + level.failed == 0:
        return GateOutcome.of(name, "fail", f"no SLO figures at level {where} (fail closed: "
                           "the load profile must declare an SLO and run that level)")
    status: Status = "pass"
    problems = [] if level.slo.get("meets_slo") else [
        f"p99 TTFT {level.ttft_ms['p99']:.0f} ms / TPOT {level.tpot_ms['p99']:.1f} ms vs "
        f"{level.slo['ttft_p99_ms']:.0f} / {level.slo['tpot_p99_ms']:.0f}"
        + (f", {level.failed} failed" if level.failed else "")]
    if problems:
        status = "fail"
    evidence: dict = dict(level.slo)
    baseline_status: Status | None = None
    if gate.min_attainment is not None:
        # a test's p-value joins Holm's adjustment only when the test alone decides: a
        # level past its p99 targets fails whatever the attainment
        p99_failed = bool(problems)
        cand = _attainment(level, gate.min_attainment, confidence, seed)
        status = "fail" if status == "fail" or cand.status == "fail" else (
            "inconclusive" if cand.status == "inconclusive" else status)
        if cand.status != "pass":
            problems.append(f"attainment {cand.describe(gate.min_attainment, 'min')}")
        blevel = _slo_level(ev.base_load, level.key)
        base = _attainment(blevel, gate.min_attainment, confidence, seed) \
            if blevel is not None and blevel.slo and blevel.completed + blevel.failed else None
        baseline_status = base.status if base else None
        evidence.update(candidate=cand.to_json(), baseline=base.to_json() if base else None)
        if not p99_failed:
            evidence["p_fail"] = cand.p_meets
        if base is not None and base.status != "pass":
            problems.append(f"baseline attainment {base.rate:.3f} [{base.low:.3f}, "
                            f"{base.high:.3f}] ({BASELINE_MISSES[base.status]})")
    detail = (f"candidate at {level.key}: " + ("; ".join(problems) if problems else
              f"meets the SLO, attainment {level.slo['attainment']:.3f}"))
    return GateOutcome.of(GateId("slo", level=level.key), status, detail,
                          gate.min_attainment, level.slo["attainment"], evidence,
                          baseline_status=baseline_status)
