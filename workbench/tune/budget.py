"""What a tune may spend, and what the next trial may cost before it starts.

`--max-hours` is a bound, not a hint: the search starts no trial whose first look could pass
it, and a trial takes no second look that would end past it (Plan.look_deadline,
pipeline/look_cost.py). A trial's cost is known only after it ran, and it is not the same
for every trial: the first of a tune also measures the baseline's suites, which later
trials read from the cache, and one stopped early (gate/early.py) measured only part of
what the next may. So the next trial is priced at the first look of the dearest trial
measured in this tune, from where its time went (timing.json): without the baseline's
suites, and a stopped one grown to every suite run (docs/tune.md, "Budget"). A second look
is not priced: it is taken only where it fits in what is left, so pricing it, at up to the
policy's hour, kept most of the default space out of a two-hour tune (docs/benchmarks.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from workbench.config.gate_policy import Objective
from workbench.pipeline.look_cost import DEADLINE_SKIP
from workbench.sweep.table import SweepRow

__all__ = ["Budget", "next_trial_s", "second_look_cut"]


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


def next_trial_s(rows: Iterable[SweepRow], suite_runs: int = 0,
                 same_build: Callable[[str], bool] | None = None, rounds: int = 1) -> float:
    """The next trial's first look, in seconds at worst: the dearest trial measured in this
    tune, priced by trial_price. 0 before any trial was measured here (cached trials cost
    nothing, and say nothing of the next). While no trial here was measured in full, the
    stopped ones are priced as if they had run every one of the plan's `suite_runs` and
    the load test (stopped_price). same_build: which trials (by name) were built as the
    next one will be (its method): then the dearest trial's build is replaced by the
    longest of theirs, where one of them was built here (an AWQ build on two cores takes
    several times a GPTQ one, docs/tune.md "Budget")."""
    measured = [r for r in rows if r.measured_now and r.evaluate_s is not None]
    # a trial stopped in its second look measured its whole first look
    full = [r for r in measured if not r.stopped_by or r.looks == 2]
    priced = [(trial_price(r), r) for r in full] if full else [
        (stopped_price(r, suite_runs, rounds), r) for r in measured]
    if not priced:
        return 0.0
    like = [b for r in measured if same_build is not None and same_build(r.candidate)
            and (b := _build_s(r)) > 0]
    if not like:
        return max(price for price, _ in priced)
    return max(price - _build_s(r) for price, r in priced) + max(like)


def _build_s(row: SweepRow) -> float:
    """The seconds a trial spent building its candidate (its timeline's quantise spans); 0
    where it found its build in the cache (quantize.json), which says nothing of a build's
    time."""
    if not row.run_dir:
        return 0.0
    try:
        built = json.loads((Path(row.run_dir) / "quantize.json").read_text()).get("source")
    except (OSError, ValueError, AttributeError):
        built = None
    spans = _spans(Path(row.run_dir) / "timing.json") if built == "built" else None
    return sum(float(s["seconds"]) for s in spans or [] if s.get("kind") == "quantise")


def stopped_price(row: SweepRow, suite_runs: int, rounds: int = 1) -> float:
    """A stopped trial's price grown to a whole first look: its candidate's suites scaled by
    every suite run over those it measured (its build, engine starts and the baseline's
    share do not grow with the suites left), plus a load test for each model and round as
    long as the longest its timeline shows (the baseline's, where the trial measured it),
    else one minute each, and an engine start for each model's rounds after the first.
    Without a timeline, its whole time is scaled."""
    left = [n for n in row.not_measured if n != "load test"]
    done = suite_runs - len(left)
    scale = suite_runs / done if suite_runs and done > 0 else float(max(len(left), 1) + 1)
    timing = Path(row.run_dir) / "timing.json" if row.run_dir else None
    load = _kind_seconds(timing, "load") if timing else None
    spans = _suite_seconds(timing) if timing else None
    start = _kind_seconds(timing, "engine_start") if timing else None
    loads = (2 * (load or 60.0) * max(rounds, 1) + 2 * (start or 60.0) * max(rounds - 1, 0)
             + _load_sessions_s(row, start))
    if spans is None or row.looks == 2:
        return trial_price(row) * scale + loads
    baseline, candidate = spans
    return (row.evaluate_s or 0.0) - baseline + candidate * (scale - 1) + loads


def _load_sessions_s(row: SweepRow, start: float | None) -> float:
    """The engine starts a stopped trial's load tests would add where its suites ran on
    every core: each model's load test then runs in a session of its own
    (measure/sessions.py), as long to start as the longest start its timeline shows."""
    if (_record(row).get("device") or {}).get("suite_binding") != "every-core":
        return 0.0
    return 2 * (start or 60.0)


def _record(row: SweepRow) -> dict:
    """The trial's decision record ({} where it cannot be read)."""
    try:
        return dict(json.loads((Path(row.run_dir or "") / "decision.json").read_text()))
    except (OSError, ValueError, TypeError):
        return {}


def trial_price(row: SweepRow) -> float:
    """What a trial like this one may cost next time, from where its time went (its
    timing.json): its first look less the baseline's suites, which are measured once per
    tune and cached. A trial that looked twice is priced at the time its second look began;
    one without a timeline (measured before timing.json had stages) at its wall time."""
    wall = row.evaluate_s or 0.0
    timing = Path(row.run_dir) / "timing.json" if row.run_dir else None
    spans = _spans(timing) if timing else None
    if spans is None:
        return wall
    second = next((float(s["start_s"]) for s in spans if s["name"] == "second look"), None)
    if row.looks == 2 and second is None:
        return wall
    end = wall if second is None else second
    return end - _role_suites([s for s in spans if float(s.get("start_s", 0.0)) < end])[0]


def second_look_cut(row: SweepRow) -> bool:
    """Whether the trial's second look was due and not taken for want of the tune's hours
    (pipeline/look_cost.py): its decision is then its first look's, not what more items
    would have made it."""
    skipped = ((_record(row).get("policy") or {}).get("looks") or {}).get("skipped") or ""
    return DEADLINE_SKIP in skipped


def _spans(timing: Path) -> list[dict] | None:
    try:
        return list(json.loads(timing.read_text())["spans"])
    except (OSError, ValueError, KeyError):
        return None


def _kind_seconds(timing: Path, kind: str) -> float | None:
    """The longest span of one kind in a run's timeline; None when it has none."""
    spans = _spans(timing)
    if spans is None:
        return None
    return max((float(s["seconds"]) for s in spans if s.get("kind") == kind), default=None)


def _suite_seconds(timing: Path) -> tuple[float, float] | None:
    """Seconds the baseline's and the candidate's suites took in a run (timing.json)."""
    spans = _spans(timing)
    return None if spans is None else _role_suites(spans)


def _role_suites(spans: list[dict]) -> tuple[float, float]:
    base, cand = (sum(s["seconds"] for s in spans if s["kind"] == "suite"
                      and s["name"].startswith(f"{role}:")) for role in ("baseline", "candidate"))
    return float(base), float(cand)
