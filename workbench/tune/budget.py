"""What a tune may spend, and what the next trial may cost before it starts.

`--max-hours` is a bound, not a hint: the search starts no trial that could pass it. A
trial's cost is known only after it ran, and it is not the same for every trial: one whose
sample leaves gates open and fails none takes a second look at every item (gate/looks.py),
which on the default model cost 3.7 times a trial that stopped at its first look (2,089 s
against 568 s, docs/benchmarks.md, issue 23), and the first trial of a tune also measures
the baseline's suites, which later trials read from the cache. So the next trial is priced
at its worst case from where the trials' time went (timing.json): a first look without the
baseline's suites, and a second look's suites grown by the items it adds (docs/tune.md,
"Budget").
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

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
    # measure every trial in full (`tune --measure-all`): what stopping early saves is then
    # the difference between two tunes of the same space (benchmarks/tune_saving.py)
    measure_all: bool = False


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


def next_trial_s(rows: Iterable[SweepRow], growth: float, suite_runs: int = 0,
                 second_look_cap_s: float | None = None) -> float:
    """The next trial's worst-case seconds: the dearest trial measured in this tune, priced
    by trial_price. 0 before any trial was measured here (cached trials cost nothing, and
    say nothing of the next). A trial stopped early (gate/early.py) measured only part of
    what the next may: while no trial here was measured in full, the stopped ones are
    priced as if they had run every one of the plan's `suite_runs` and the load test
    (stopped_price). second_look_cap_s: the policy's second_look_max_minutes, past which a
    second look is not taken (gate/looks.py), so no price holds a dearer one."""
    measured = [r for r in rows if r.measured_now and r.evaluate_s is not None]
    looked_twice = any(r.looks == 2 for r in measured)
    full = [r for r in measured if not r.stopped_by]
    if full:
        return max(trial_price(r, growth, looked_twice, second_look_cap_s) for r in full)
    return max((stopped_price(r, growth, looked_twice, suite_runs, second_look_cap_s)
                for r in measured), default=0.0)


def stopped_price(row: SweepRow, growth: float, looked_twice: bool, suite_runs: int,
                  cap_s: float | None = None) -> float:
    """A stopped trial's price grown to a whole one: its candidate's suites scaled by every
    suite run over those it measured (its build, engine starts and the baseline's share do
    not grow with the suites left), their second look at that size, plus a load test for
    each model as long as the longest its timeline shows (the baseline's, where the trial
    measured it), else one minute each. Without a timeline, its whole time is scaled."""
    left = [n for n in row.not_measured if n != "load test"]
    done = suite_runs - len(left)
    scale = suite_runs / done if suite_runs and done > 0 else float(max(len(left), 1) + 1)
    timing = Path(row.run_dir) / "timing.json" if row.run_dir else None
    load = _kind_seconds(timing, "load") if timing else None
    spans = _suite_seconds(timing) if timing else None
    if spans is None or row.looks == 2:
        return trial_price(row, growth, looked_twice, cap_s) * scale + 2 * (load or 60.0)
    baseline, candidate = spans
    first_look = (row.evaluate_s or 0.0) - baseline + candidate * (scale - 1)
    baseline_again = 0.0 if looked_twice else (baseline or candidate * scale)
    second = _capped((candidate * scale + baseline_again) * (growth - 1), cap_s)
    return first_look + second + 2 * (load or 60.0)


def _capped(seconds: float, cap_s: float | None) -> float:
    return seconds if cap_s is None else min(seconds, cap_s)


def trial_price(row: SweepRow, growth: float, looked_twice: bool,
                cap_s: float | None = None) -> float:
    """What a trial like this one may cost next time, from where its time went
    (its timing.json). The baseline's suites are measured once per tune and cached, so
    they leave the price of a first look; a second look answers (growth - 1) times the
    sample's items again, for the candidate's suites and, until some trial of this tune
    has looked twice, the baseline's: at its own suites' time when this trial measured
    them, at the candidate's when they came from the cache (a resumed tune, whose first
    trial here is not the one that measured the baseline; both models answer the same
    items). A trial that looked twice is priced at what it took;
    one without a timeline (measured before timing.json had stages) at its wall time,
    grown whole."""
    wall = row.evaluate_s or 0.0
    spans = _suite_seconds(Path(row.run_dir) / "timing.json") if row.run_dir else None
    if row.looks == 2:
        return wall
    if spans is None:
        return wall * growth
    baseline, candidate = spans
    baseline_again = 0.0 if looked_twice else (baseline or candidate)
    extra = _capped((candidate + baseline_again) * (growth - 1), cap_s)
    return wall - baseline + extra


def _kind_seconds(timing: Path, kind: str) -> float | None:
    """The longest span of one kind in a run's timeline; None when it has none."""
    try:
        spans = json.loads(timing.read_text())["spans"]
    except (OSError, ValueError, KeyError):
        return None
    return max((float(s["seconds"]) for s in spans if s.get("kind") == kind), default=None)


def _suite_seconds(timing: Path) -> tuple[float, float] | None:
    """Seconds the baseline's and the candidate's suites took in a run (timing.json)."""
    try:
        spans = json.loads(timing.read_text())["spans"]
    except (OSError, ValueError, KeyError):
        return None
    base, cand = (sum(s["seconds"] for s in spans if s["kind"] == "suite"
                      and s["name"].startswith(f"{role}:")) for role in ("baseline", "candidate"))
    return float(base), float(cand)
