"""What a tune may spend, and what the next trial may cost before it starts.

`--max-hours` is a bound, not a hint: the search starts no trial that could pass it. A
trial's cost is known only after it ran, and it is not the same for every trial: one whose
sample leaves gates open and fails none takes a second look at every item (gate/looks.py),
which on the default model cost 3.7 times a trial that stopped at its first look (2,089 s
against 568 s, docs/benchmarks.md, issue 23). So the next trial is priced at its worst
case: the dearest first look measured so far, grown by the items a second look adds, in
proportion to the items the first look answered (docs/tune.md, "Budget").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from workbench.config.gate_policy import Objective
from workbench.gate.looks import planned_looks
from workbench.plan.plan import Plan
from workbench.sweep.table import SweepRow

__all__ = ["Budget", "next_trial_s", "second_look_growth"]


@dataclass(frozen=True)
class Budget:
    max_trials: int
    max_hours: float
    # what "cheapest" means among the trials promoted (the table's x-axis too); keeping a
    # block only ever adds bytes, so on weights the fewest kept blocks win
    objective: Objective = "weights"


def second_look_growth(p: Plan) -> float:
    """How many times a first look's items a trial answers when it looks twice: 1 plus
    every item over the sample's (the second look's answers are not all new, since the
    cache keeps the sample's; counting them all keeps the price on the safe side). 1 when
    the policy or the profile allows one look only."""
    if planned_looks(p.policy.second_look, p.growing_runs()) == 1:
        return 1.0
    seed, profile = p.cfg.seed, p.cfg.profile
    sample = sum(len(s.sample(profile, seed)) * len(list(s.spec.runs())) for s in p.suites)
    every = sum(len(s.sample("full", seed)) * len(list(s.spec.runs())) for s in p.suites)
    return 1.0 + every / max(sample, 1)


def next_trial_s(rows: Iterable[SweepRow], growth: float) -> float:
    """The next trial's worst-case seconds: the dearest trial measured in this tune, a
    trial that stopped at one look counted as if it had taken the second. 0 before any
    trial was measured here (cached trials cost nothing, and say nothing of the next)."""
    measured = [r for r in rows if r.measured_now and r.evaluate_s is not None]
    return max(((r.evaluate_s or 0.0) * (1.0 if r.looks == 2 else growth)
                for r in measured), default=0.0)
