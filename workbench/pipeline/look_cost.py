"""What a second look would cost on this machine, from the first look's own spans.

A second look measures every item (gate/looks.py). Where the first look's suites already
took most of an hour (a 2-core CPU without native bf16: docs/benchmarks.md, "Compute
dtype and the int4 stand-in on an AVX2 CPU"), every item takes hours, and a run that a CI
job waits on never ends. The policy's
`second_look_max_minutes` bounds it; this module says how long it would take: each suite
run's first-look seconds scaled by its items at full over its items in the sample, the
baseline's left out when its full measurement is already cached, plus the engine starts,
load tests and stops, which a second look runs again.
"""

from __future__ import annotations

from collections.abc import Iterable

from workbench.mechanisms.timing import Span
from workbench.plan.plan import Plan

__all__ = ["second_look_seconds", "skip_reason"]

# the span kinds of a measurement that a second look repeats as they were
_REPEATED = ("engine_start", "load", "engine_stop")


def _growth(p: Plan) -> dict[str, float]:
    """Each suite run's items at full over its items in the plan's sample."""
    seed, profile = p.cfg.seed, p.cfg.profile
    return {name: len(s.sample("full", seed)) / max(1, len(s.sample(profile, seed)))
            for s in p.suites for name, _ in s.spec.runs()}


def second_look_seconds(p: Plan, spans: Iterable[Span], baseline_cached: bool) -> float:
    """The seconds a second look would take, by the first look's rates (spans named
    "<role>: <suite run>", as measure/measurement.py names them)."""
    growth = _growth(p)
    total = 0.0
    for sp in spans:
        role, _, run = sp.name.partition(": ")
        if sp.kind == "suite" and not (role == "baseline" and baseline_cached):
            total += sp.seconds * growth.get(run, 1.0)
        elif sp.kind in _REPEATED:
            total += sp.seconds
    return total


def skip_reason(p: Plan, seconds: float) -> str | None:
    """Why a due second look is not taken (None: it is)."""
    bound = p.policy.second_look_max_minutes
    if bound is None or seconds <= bound * 60:
        return None
    return (f"measuring every item would take about {seconds / 60:.0f} min on this machine "
            f"by the first look's own rates, over the policy's second_look_max_minutes "
            f"({bound:g}); measure the full profile where it is faster (--profile full)")
