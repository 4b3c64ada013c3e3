"""The two searches of a tune (tune/walk.py), driven by a stand-in runner that answers each
trial with a decision, so that the search's own logic is what is tested: the walk over a
space tries its points cheapest first and stops at the first promoted; a failed trial and
the budget end either search; the keep-k search settles on the fewest blocks promoted."""

from __future__ import annotations

import pytest

from workbench.config.run_config import Candidate
from workbench.config.tune import TuneConfig, TuneSpace
from workbench.sweep.table import SweepRow
from workbench.tune.budget import Budget
from workbench.tune.outcome import none_promoted
from workbench.tune.proxies import order_by_proxy
from workbench.tune.trials import TrialSpec
from workbench.tune.walk import equal_size_run, search_kept, walk_space

CAND = Candidate(recipe="w4a16", group_size=64)


def spec(name: str, kept: tuple[int, ...] = ()) -> TrialSpec:
    return TrialSpec(name, CAND, kept, f"recipe {name}")


class Answers:
    """A runner that decides each trial by name and keeps the order it was asked in."""

    def __init__(self, decisions: dict[str, str], status: dict[str, str] | None = None):
        self.decisions, self.status, self.asked = decisions, status or {}, []

    def __call__(self, s: TrialSpec) -> SweepRow:
        self.asked.append(s.name)
        status = self.status.get(s.name, "decided")
        return SweepRow(s.name, status, decision=self.decisions.get(s.name),
                        reason="engine died" if status == "failed" else "",
                        failing_gates=[] if self.decisions.get(s.name) == "promote"
                        else ["quality:arithmetic"])


def free(_rows, _spec=None) -> float:
    return 0.0


BUDGET = Budget(max_trials=10, max_hours=1.0)
SPECS = [spec("sym-g128"), spec("sym-g64"), spec("asym-g32"), spec("asym-g32-keep1", (2,))]


def test_the_walk_stops_at_the_first_point_promoted_the_cheapest() -> None:
    runner = Answers({"sym-g128": "reject", "sym-g64": "inconclusive", "asym-g32": "promote",
                      "asym-g32-keep1": "promote"})
    search = walk_space(SPECS, runner, BUDGET, 0.0, free, clock=lambda: 0.0)
    assert runner.asked == ["sym-g128", "sym-g64", "asym-g32"]  # the dearer one not needed
    assert search.chosen() == 2 and search.specs[2].name == "asym-g32"
    assert "`asym-g32` (recipe asym-g32) is the cheapest point promoted" in search.stopped
    assert "the 1 point(s) after it, none smaller, were not needed" in search.stopped
    assert not search.failed


def test_a_trial_whose_second_look_the_hours_could_not_hold_ends_the_search(
        tmp_path) -> None:
    """Its inconclusive is its first look's: a dearer point promoted after it would not be
    known to be the cheapest, nor k the fewest blocks."""
    import json

    from workbench.pipeline.look_cost import DEADLINE_SKIP

    def cut(folder, why: str) -> str:
        folder.mkdir()
        (folder / "decision.json").write_text(json.dumps({"policy": {"looks": {
            "taken": 1, "skipped": why}}}))
        return str(folder)

    class Cut(Answers):
        def __call__(self, s: TrialSpec) -> SweepRow:
            row = super().__call__(s)
            if s.name == "sym-g64":
                row.run_dir = cut(tmp_path / s.name, f"about 40 min, 12 min {DEADLINE_SKIP}")
            return row

    runner = Cut({"sym-g128": "reject", "sym-g64": "inconclusive", "asym-g32": "promote"})
    search = walk_space(SPECS, runner, BUDGET, 0.0, free, clock=lambda: 0.0)
    assert runner.asked == ["sym-g128", "sym-g64"] and search.chosen() is None
    assert "no time for trial sym-g64's second look" in search.stopped
    assert "again with more hours" in search.stopped and not search.failed
    # skipped for the policy's own bound: the first look's decision is the trial's, and
    # the walk goes on
    policy = Answers({"sym-g128": "reject", "sym-g64": "inconclusive", "asym-g32": "promote"})
    bound = cut(tmp_path / "bound", "over the policy's second_look_max_minutes (60)")

    def with_bound(s: TrialSpec) -> SweepRow:
        row = policy(s)
        row.run_dir = bound
        return row

    assert walk_space(SPECS, with_bound, BUDGET, 0.0, free, clock=lambda: 0.0).chosen() == 2


def test_a_space_with_no_promoted_point_is_walked_to_its_end() -> None:
    runner = Answers({s.name: "reject" for s in SPECS})
    search = walk_space(SPECS, runner, BUDGET, 0.0, free, clock=lambda: 0.0)
    assert runner.asked == [s.name for s in SPECS] and search.chosen() is None
    assert search.stopped == "every point of the space was tried (4) and none was promoted"
    best = none_promoted(search)
    assert best.status == "none_promoted" and "(recipe asym-g32-keep1)" in best.reason
    assert search.kept(3) == [2]


def test_the_budget_and_a_failed_trial_end_the_walk() -> None:
    runner = Answers({s.name: "reject" for s in SPECS})
    search = walk_space(SPECS, runner, Budget(max_trials=2, max_hours=1.0), 0.0, free,
                        clock=lambda: 0.0)
    assert runner.asked == ["sym-g128", "sym-g64"]
    assert search.stopped == ("the budget of 2 trial(s) was spent; 2 point(s) of the space "
                              "not tried")
    # a trial priced past the hours left is not started
    late = walk_space(SPECS, Answers({}), BUDGET, 0.0, lambda rows, spec: 1800.0,
                      clock=lambda: 2000.0)
    assert late.rows == {} and "could be passed by the next trial" in late.stopped
    broken = Answers({"sym-g128": "reject"}, status={"sym-g64": "failed"})
    search = walk_space(SPECS, broken, BUDGET, 0.0, free, clock=lambda: 0.0)
    assert broken.asked == ["sym-g128", "sym-g64"] and search.failed
    assert search.stopped == "trial sym-g64 failed: engine died"


def test_the_keep_search_doubles_then_bisects_to_the_fewest_blocks_promoted() -> None:
    passes_from = 3  # keeping 3 or more blocks passes
    asked: list[int] = []

    def runner(s: TrialSpec) -> SweepRow:
        asked.append(len(s.kept))
        return SweepRow(s.name, "decided",
                        decision="promote" if len(s.kept) >= passes_from else "reject")

    search = search_kept(lambda k: spec(f"keep{k}", tuple(range(k))), 30, runner, BUDGET, 0.0,
                         free, clock=lambda: 0.0)
    assert asked == [0, 1, 2, 4, 3]
    assert search.chosen() == 3 and search.stopped == "settled: keeping 3 block(s) is the " \
        "fewest promoted (2 was not)"


def test_the_space_axes_refuse_repeats_and_impossible_values() -> None:
    for bad in ({"group_sizes": [64, 64]}, {"keep": [-1]}, {"group_sizes": [0]},
                {"methods": ["gptq", "gptq"]}, {"methods": ["autoround"]}):
        with pytest.raises(ValueError):
            TuneSpace(**bad)
    assert TuneConfig().space is None  # no space: the keep-k search
    assert TuneSpace().keep == [0] and TuneSpace().group_sizes == [128, 64, 32]


def test_a_promoted_trial_the_objective_cannot_rank_is_still_confirmed() -> None:
    """--objective cost with no price (or throughput with no SLO level) leaves the table
    without a recommendation: the trial confirmed is then the first promoted in the
    search's order, never none."""
    from workbench.sweep.table import Recommendation, SweepRecord
    from workbench.tune.outcome import pick_trial

    runner = Answers({"sym-g128": "reject", "sym-g64": "promote"})
    search = walk_space(SPECS, runner, BUDGET, 0.0, free, clock=lambda: 0.0)
    unranked = SweepRecord("m", "cpu", "g", "cost", "worst_lower_bound", "w", {},
                           list(search.rows.values()), [],
                           Recommendation(None, None, "no price: cost not known"), "d", "t")
    assert pick_trial(search, unranked) == 1
    ranked = SweepRecord("m", "cpu", "g", "weights", "worst_lower_bound", "w", {},
                         list(search.rows.values()), [],
                         Recommendation("sym-g64", None, "lightest"), "d", "t")
    assert pick_trial(search, ranked) == 1
    nothing = walk_space(SPECS, Answers({s.name: "reject" for s in SPECS}), BUDGET, 0.0, free,
                         clock=lambda: 0.0)
    assert pick_trial(nothing, unranked) is None


SIZED = [TrialSpec("gptq-sym-g64", CAND, (), "gptq sym g64", 100),
         TrialSpec("awq-sym-g64", CAND, (), "awq sym g64", 100),
         TrialSpec("gptq-asym-g32", CAND, (), "gptq asym g32", 120),
         TrialSpec("awq-asym-g32", CAND, (), "awq asym g32", 120),
         TrialSpec("gptq-asym-g32-keep1", CAND, (2,), "gptq asym g32, block 2", 130)]


def test_runs_of_equal_size_are_found_and_an_unsized_point_stands_alone() -> None:
    assert [equal_size_run(SIZED, i) for i in (0, 1, 2, 4)] == [2, 2, 4, 5]
    unsized = [spec("a"), spec("b")]
    assert equal_size_run(unsized, 0) == 1


class RankBy:
    """A ranker that orders by a fixed value per name and keeps what it was asked."""

    def __init__(self, values: dict[str, float | None]):
        self.values, self.asked = values, []

    def __call__(self, tier: list[TrialSpec]) -> list[TrialSpec]:
        self.asked.append([s.name for s in tier])
        by_name = {s.name: s for s in tier}
        return [by_name[n] for n in order_by_proxy(list(by_name), self.values)]


def test_points_of_equal_size_are_tried_likeliest_first_and_never_before_a_smaller() -> None:
    ranker = RankBy({"gptq-sym-g64": 1.28, "awq-sym-g64": 1.21, "gptq-asym-g32": 1.10,
                     "awq-asym-g32": 1.07})
    runner = Answers({"awq-sym-g64": "reject", "gptq-sym-g64": "reject",
                      "awq-asym-g32": "promote", "gptq-asym-g32": "promote"})
    search = walk_space(SIZED, runner, BUDGET, 0.0, free, clock=lambda: 0.0, rank=ranker)
    # each run ranked only when the walk reaches it; a run of one is never ranked
    assert ranker.asked == [["gptq-sym-g64", "awq-sym-g64"], ["gptq-asym-g32", "awq-asym-g32"]]
    assert runner.asked == ["awq-sym-g64", "gptq-sym-g64", "awq-asym-g32"]
    assert search.specs[search.chosen()].name == "awq-asym-g32"
    assert search.order == ["awq-sym-g64", "gptq-sym-g64", "awq-asym-g32", "gptq-asym-g32",
                            "gptq-asym-g32-keep1"]
    assert "the 2 point(s) after it, none smaller, were not needed" in search.stopped


def test_a_run_promoted_early_is_not_ranked_past_it() -> None:
    ranker = RankBy({})
    runner = Answers({"gptq-sym-g64": "promote"})
    walk_space(SIZED, runner, BUDGET, 0.0, free, clock=lambda: 0.0, rank=ranker)
    assert runner.asked == ["gptq-sym-g64"]  # no value: the stated prior holds
    assert ranker.asked == [["gptq-sym-g64", "awq-sym-g64"]]


def test_the_proxy_order_puts_the_lowest_first_and_the_unknown_last_in_prior_order() -> None:
    names = ["a", "b", "c", "d"]
    assert order_by_proxy(names, {"a": 1.3, "b": None, "c": 1.1, "d": 1.1}) == ["c", "d", "a",
                                                                                  "b"]
    assert order_by_proxy(names, {}) == names
