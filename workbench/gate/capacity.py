"""The capacity gate: the candidate's capacity at the SLO against the baseline's, judged on
the brackets the searches found (loadtest/capacity.py).

Each engine session's search brackets its model's capacity between the heaviest level that
held and the lightest above it that did not. A model's bracket spans all its sessions
(the lowest level held in any, the highest not held in any), so it carries both the
search's resolution and the variance between sessions; the ratio's interval is then
[candidate low / baseline high, candidate high / baseline low]. Pass when it lies at or
above min_ratio, fail when wholly below, inconclusive across it. A bracket with nothing
held has low 0 (a candidate that holds nothing fails), one with nothing failed no top
(infinity; null in the record). A baseline that held nothing leaves the gate
inconclusive, and says the SLO is the policy's defect (docs/gates.md, "Capacity at the
SLO").
"""

from __future__ import annotations

import math

from workbench.config.gate_policy import CapacityGate
from workbench.gate.evidence import Evidence, GateId, GateOutcome, Status
from workbench.loadtest.results import LoadResult

__all__ = ["CAPACITY_GATE", "capacity_bracket", "capacity_outcome"]


def capacity_bracket(load: LoadResult) -> tuple[float, float, str] | None:
    """(low, high, knob) over the model's sessions; None when no session searched."""
    found = [r.capacity for r in load.all_rounds() if r.capacity]
    if not found:
        return None
    lows = [float(c.get("held") or 0.0) for c in found]  # none held: 0
    highs = [float(c.get("not_held") or math.inf) for c in found]  # none failed: no top
    return min(lows), max(highs), found[0]["knob"]


CAPACITY_GATE = GateId("capacity", "at_slo", check="min_ratio")  # before any load profile


def capacity_outcome(gate: CapacityGate, ev: Evidence) -> GateOutcome:
    name = CAPACITY_GATE
    if ev.device not in gate.devices:
        return GateOutcome.of(name, "not_applicable", f"judges {', '.join(gate.devices)} "
                              f"measurements; this run is {ev.device}")
    brackets = [capacity_bracket(load) if load is not None else None
                for load in (ev.base_load, ev.cand_load)]
    base, cand = brackets
    if base is None or cand is None:
        return GateOutcome.of(name, "fail", "no capacity search in this run (the load "
                              "profile's `capacity`; fail closed)", gate.min_ratio,
                              informational=gate.informational)
    low = cand[0] / base[1] if base[1] > 0 else math.inf
    high = cand[1] / base[0] if base[0] > 0 else math.inf
    point = math.sqrt(cand[0] * cand[1]) / math.sqrt(base[0] * base[1]) \
        if min(base[0], cand[0]) > 0 and math.isfinite(base[1] * cand[1]) else math.nan
    status: Status = "pass" if low >= gate.min_ratio else "fail" if high < gate.min_ratio \
        else "inconclusive"
    detail = (f"capacity ({base[2]}) baseline [{base[0]:g}, {base[1]:g}], candidate "
              f"[{cand[0]:g}, {cand[1]:g}]: ratio in [{low:.3f}, {high:.3f}] "
              f"(min {gate.min_ratio:g})")
    if base[0] == 0:
        # no level the baseline served held the SLO: no candidate can be compared with it
        status = "inconclusive"
        detail += ("; the baseline held no level searched: the SLO is out of this "
                   "device's reach, a defect of the policy, not of the candidate")
    elif status == "inconclusive":
        detail += ("; the searches' brackets are too wide to tell: a finer resolution or "
                   "more sessions would decide")
    return GateOutcome.of(name, status, detail, gate.min_ratio, None if math.isnan(point)
                          else round(point, 4),
                          {"baseline": _finite(base[:2]), "candidate": _finite(cand[:2]),
                           "ratio_interval": _finite((low, high))},
                          informational=gate.informational)


def _finite(values: tuple[float, ...]) -> list[float | None]:
    """JSON has no infinity: an open end (a search that never failed) is null."""
    return [None if math.isinf(v) else v for v in values]
