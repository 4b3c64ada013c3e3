"""The two searches a tune runs, over trials it is handed a runner for:

- the keep-k search: the candidate's recipe with its k most sensitive blocks kept in 16-bit,
  k = 0, doubling, then bisection (schedule.py), until the fewest promoted is known;
- the walk over a space of recipes (the config's `tune.space`): the points cheapest first
  (space.py), until the first the policy promotes, which is then the cheapest promoted.
  Points of equal size are equally cheap: as the walk reaches them, a ranker may put the
  likeliest to pass first (run.py ranks by the build's held-out perplexity, proxies.py).

Both stop on the budget (trials, and hours: no trial starts whose first look could pass it,
priced by budget.py), on a trial whose second look the hours left could not hold (its
decision is then its first look's, and no later trial can say whether it would have
passed), and on a trial whose measurement failed (the trials before it are kept).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from workbench.sweep.table import SweepRow
from workbench.tune.budget import Budget, second_look_cut
from workbench.tune.outcome import Search
from workbench.tune.schedule import PASS, next_kept
from workbench.tune.trials import TrialSpec

__all__ = ["Pricer", "Ranker", "Runner", "equal_size_run", "over_budget", "search_kept",
           "walk_space"]

Runner = Callable[[TrialSpec], SweepRow]
# the next trial's worst-case seconds, from the trials so far and the next one's spec
Pricer = Callable[[Iterable[SweepRow], TrialSpec], float]
Ranker = Callable[[list[TrialSpec]], list[TrialSpec]]  # points of equal size, reordered


def over_budget(search: Search, budget: Budget, started: float, price: float,
                clock: Callable[[], float]) -> str | None:
    """Why the next trial may not start (None: it may)."""
    spent = clock() - started
    if len(search.rows) >= budget.max_trials:
        return f"the budget of {budget.max_trials} trial(s) was spent"
    if spent + price > budget.max_hours * 3600:
        return (f"the budget of {budget.max_hours:g} h could be passed by the next trial "
                f"({spent:.0f} s spent; its first look may take up to {price:.0f} s, "
                "docs/tune.md 'Budget')")
    return None


def _ran(search: Search, key: int, spec: TrialSpec, run: Runner) -> bool:
    """Run one trial into the search; False when its measurement did not decide (it ends
    the search: failed, or not judged)."""
    row = run(spec)
    search.rows[key], search.specs[key] = row, spec
    if row.status == "decided" and not second_look_cut(row):
        return True
    if row.status == "decided":
        # inconclusive only for want of hours: the trials after it could not say whether
        # it, the cheaper one, would have passed
        search.stopped = (f"the budget left no time for trial {row.candidate}'s second look, "
                          "which its first look made due; run the tune again with more "
                          "hours to take it (what was measured is reused)")
        return False
    search.failed = row.status == "failed"
    search.stopped = f"trial {row.candidate} {row.status}: {row.reason}"
    return False


def search_kept(spec_for: Callable[[int], TrialSpec], blocks: int, run: Runner,
                budget: Budget, started: float, price: Pricer,
                clock: Callable[[], float] = time.perf_counter) -> Search:
    """k = 0, doubling, bisection until settled or out of budget."""
    search = Search()
    while True:
        k = next_kept(search.decisions(), blocks)
        if k is None:
            search.stopped = _settled_text(search)
            return search
        spec = spec_for(k)
        why = over_budget(search, budget, started, price(search.rows.values(), spec), clock)
        if why is not None:
            search.stopped = why
            return search
        if not _ran(search, k, spec, run):
            return search


def _settled_text(search: Search) -> str:
    chosen = search.chosen()
    if chosen is None:
        return "every block was kept and no trial was promoted"
    below = [k for k in search.rows if k < chosen]
    return (f"settled: keeping {chosen} block(s) is the fewest promoted"
            + (f" ({max(below)} was not)" if below else " (the recipe as stated)"))


def equal_size_run(specs: list[TrialSpec], start: int) -> int:
    """Where the run of points as large as specs[start] ends (exclusive); a point of no
    known size is a run of its own."""
    size, end = specs[start].weight_bytes, start + 1
    while size is not None and end < len(specs) and specs[end].weight_bytes == size:
        end += 1
    return end


def walk_space(specs: list[TrialSpec], run: Runner, budget: Budget, started: float,
               price: Pricer, clock: Callable[[], float] = time.perf_counter,
               rank: Ranker | None = None) -> Search:
    """The points in order (cheapest first) until one is promoted, the space is spent, or
    the budget is; each run of equal-size points ranked as the walk reaches it."""
    search, specs, ranked_to = Search(order=[s.name for s in specs]), list(specs), 0
    for index in range(len(specs)):
        why = over_budget(search, budget, started, price(search.rows.values(), specs[index]),
                          clock)
        if why is not None:
            search.stopped = f"{why}; {len(specs) - index} point(s) of the space not tried"
            return search
        if rank is not None and index >= ranked_to:
            ranked_to = equal_size_run(specs, index)
            if ranked_to - index > 1:
                specs[index:ranked_to] = rank(specs[index:ranked_to])
                search.order = [s.name for s in specs]
                why = over_budget(search, budget, started,
                                  price(search.rows.values(), specs[index]), clock)
                if why is not None:  # the builds that ranked them took the time
                    search.stopped = (f"{why}; {len(specs) - index} point(s) of the space "
                                      "not tried")
                    return search
        spec = specs[index]
        if not _ran(search, index, spec, run):
            return search
        if search.rows[index].decision_here == PASS:
            left = len(specs) - index - 1
            search.stopped = (f"`{spec.name}` ({spec.label}) is the cheapest point promoted"
                              + (f"; the {left} point(s) after it, none smaller, were not "
                                 "needed" if left else ""))
            return search
    search.stopped = (f"every point of the space was tried ({len(specs)}) and none was "
                      "promoted" if specs else "the space has no point this device can take")
    return search
