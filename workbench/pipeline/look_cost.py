"""What a second look would cost on this machine, from the first look's own measurements.

A second look measures every item (gate/looks.py). Where the first look's suites already
took most of an hour (a 2-core CPU without native bf16: docs/benchmarks.md, "Compute dtype
and the int4 stand-in on an AVX2 CPU"), every item takes hours, and a run that a CI job
waits on never ends. The policy's `second_look_max_minutes` bounds it; this module says how
long it would take, and a tune's trial is held to the time left of its --max-hours the same
way (Plan.look_deadline), so the tune prices its next trial by a first look only
(tune/budget.py). Each suite run's seconds (SuiteResult.seconds) are scaled by its items
at full over its items in the sample; the baseline's are left out when its full
measurement is already cached. The rest of each side's session (engine start, load test,
stop) is added once per load round, since a second look runs those again. The figures come
with the measured pair, so a first look taken from the cache is priced as one measured now.
"""

from __future__ import annotations

import time

from workbench.measure.measurement import Measurement
from workbench.measure.pair import MeasuredPair
from workbench.plan.plan import Plan

__all__ = ["DEADLINE_SKIP", "second_look_seconds", "skip_reason"]

# how a skip_reason for the caller's deadline says so (tune/walk.py ends its search on it)
DEADLINE_SKIP = "left of the tune's --max-hours"


def _growth(p: Plan) -> dict[str, float]:
    """Each suite run's items at full over its items in the plan's sample."""
    seed, profile = p.cfg.seed, p.cfg.profile
    return {name: len(s.sample("full", seed)) / max(1, len(s.sample(profile, seed)))
            for s in p.suites for name, _ in s.spec.runs()}


def _side_seconds(m: Measurement, growth: dict[str, float], rounds: int,
                  suites_cached: bool) -> float:
    suites = sum(r.seconds for r in m.suites.values())
    sessions = max(0.0, m.wall_time_s - suites) * rounds
    if suites_cached:
        return sessions
    return sessions + sum(r.seconds * growth.get(name, 1.0) for name, r in m.suites.items())


def second_look_seconds(p: Plan, pair: MeasuredPair, baseline_cached: bool) -> float:
    """The seconds a second look would take, by the first look's rates."""
    growth, rounds = _growth(p), max(1, p.cfg.load.rounds)
    return (_side_seconds(pair.baseline, growth, rounds, baseline_cached)
            + _side_seconds(pair.candidate, growth, rounds, False))


def skip_reason(p: Plan, seconds: float, now: float | None = None) -> str | None:
    """Why a due second look is not taken (None: it is): past the policy's bound, or past
    the caller's deadline (a tune trial's: its --max-hours), `now` on time.perf_counter's
    clock."""
    bound = p.policy.second_look_max_minutes
    if bound is not None and seconds > bound * 60:
        return (f"measuring every item would take about {seconds / 60:.0f} min on this "
                f"machine by the first look's own rates, over the policy's "
                f"second_look_max_minutes ({bound:g}); measure the full profile where it is "
                f"faster (--profile full)")
    deadline = p.look_deadline
    left = None if deadline is None else deadline - (time.perf_counter() if now is None else now)
    if left is not None and seconds > left:
        return (f"measuring every item would take about {seconds / 60:.0f} min on this "
                f"machine by the first look's own rates, more than the "
                f"{max(left, 0.0) / 60:.0f} min {DEADLINE_SKIP}; run the tune again with "
                f"more hours to take it (what was measured is reused)")
    return None
