"""Two looks at the items (gate/looks.py): when a second look is due and at what level
each look is judged. How often two looks promote a worse candidate, by simulation through
the real gates: benchmarks/two_looks.py (docs/gates.md, "Two looks")."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from workbench.config.gate_policy import GatePolicy, QualityGate
from workbench.gate.evidence import GateId, GateOutcome
from workbench.gate.gates import decide
from workbench.gate.looks import (
    more_items_could_decide,
    one_look,
    planned_looks,
    second_look_due,
)
from workbench.measure.pair import MeasuredPair
from workbench.pipeline.look_cost import second_look_seconds, skip_reason
from workbench.plan.plan import Plan
from workbench.record.policy_text import looks_line
from workbench.suites.definition import load_suite


def _gate(section: str, subject: str, status: str, informational: bool = False,
          check: str | None = None) -> GateOutcome:
    return GateOutcome.of(GateId(section, subject, check=check), status,  # type: ignore[arg-type]
                          "", informational=informational)


def test_each_of_two_looks_is_judged_at_half_of_alpha() -> None:
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=0.05)], second_look=True)
    assert policy.for_look(1) is policy
    assert policy.for_look(2).confidence == pytest.approx(0.975)
    looks = one_look(0.95, 2, "smoke")
    assert looks["confidence_per_look"] == pytest.approx(0.975) and looks["taken"] == 1
    assert one_look(0.95, 1, "full")["confidence_per_look"] == pytest.approx(0.95)


def test_a_second_look_is_planned_only_when_allowed_and_something_grows() -> None:
    assert planned_looks(True, {"arithmetic"}) == 2
    assert planned_looks(True, set()) == 1  # every item already measured (profile full)
    assert planned_looks(False, {"arithmetic"}) == 1


def test_a_second_look_is_due_only_for_open_gates_more_items_can_decide() -> None:
    looks = one_look(0.95, 2, "smoke")
    growing = {"arithmetic", "advbench"}
    gates = [_gate("quality", "arithmetic", "inconclusive"),
             _gate("quality", "long-context", "inconclusive"),  # every item already in
             _gate("latency", "tpot_p50_ms", "inconclusive"),  # more items: no help
             _gate("latency", "ttft_p95_ms", "inconclusive", informational=True),
             _gate("health", "(pooled)", "inconclusive"),
             _gate("safety", "advbench", "pass")]
    due = second_look_due(looks, "inconclusive", gates, growing)
    assert due == ["quality:arithmetic", "health:(pooled)"]
    # a fail stands: no second look can undo it
    failed = [*gates, _gate("quality", "arithmetic", "fail", check="floor")]
    assert second_look_due(looks, decide(failed), failed, growing) == []
    # planned once, or already looked twice
    assert second_look_due(one_look(0.95, 1, "smoke"), "inconclusive", gates, growing) == []
    assert second_look_due({**looks, "taken": 2}, "inconclusive", gates, growing) == []
    assert more_items_could_decide(gates, set()) == []


def test_the_record_says_how_many_looks_and_at_what_level() -> None:
    from workbench.record.policy_text import looks_line

    assert looks_line({"looks": one_look(0.95, 1, "smoke")}) == ""  # the policy's level whole
    first = looks_line({"looks": one_look(0.95, 2, "smoke")})
    assert first.startswith("Judged as the first of two possible looks (the smoke sample)")
    assert "confidence 0.975" in first and "at most 2.50%" in first
    second = looks_line({"looks": {
        **one_look(0.95, 2, "smoke"), "taken": 2, "profiles": ["smoke", "full"],
        "first_look": {"profile": "smoke", "decision": "inconclusive",
                       "open_gates": ["quality:arithmetic", "health:(pooled)"],
                       "folder": "look-1"}}})
    assert second.startswith("Two looks: the smoke sample was inconclusive with no gate "
                             "failed, 2 gate(s) open")
    assert "`look-1/decision.md`" in second


def _plan(suites: list[str], bound: float | None, deadline: float | None = None) -> Plan:
    """What look_cost reads of a plan: the sample, the suites and the policy."""
    cfg = SimpleNamespace(seed=0, profile="smoke", load=SimpleNamespace(rounds=2))
    return cast(Plan, SimpleNamespace(
        cfg=cfg, suites=[load_suite(n) for n in suites], look_deadline=deadline,
        policy=GatePolicy(second_look=True, second_look_max_minutes=bound)))


def _pair(base: dict[str, float], cand: dict[str, float], wall: tuple[float, float]
          ) -> MeasuredPair:
    """What look_cost reads of a measured pair: each suite's seconds, each side's wall."""
    def side(suites: dict[str, float], wall_s: float) -> SimpleNamespace:
        return SimpleNamespace(wall_time_s=wall_s, suites={
            name: SimpleNamespace(seconds=sec) for name, sec in suites.items()})
    return cast(MeasuredPair, SimpleNamespace(baseline=side(base, wall[0]),
                                              candidate=side(cand, wall[1])))


def test_a_second_look_costs_each_suite_scaled_to_every_item_and_the_sessions_again() -> None:
    p = _plan(["arithmetic", "long-context"], None)
    grows = len(p.suites[0].sample("full", 0)) / len(p.suites[0].sample("smoke", 0))
    assert grows > 1 and len(p.suites[1].sample("full", 0)) == len(
        p.suites[1].sample("smoke", 0))  # long-context has no smaller sample
    # each side's session: its suites, plus 81 s of engine start, load test and stop
    pair = _pair({"arithmetic": 60, "long-context": 100}, {"arithmetic": 90, "long-context": 100},
                 (160 + 81, 190 + 81))
    assert second_look_seconds(p, pair, baseline_cached=False) == pytest.approx(
        (60 + 90) * grows + 200 + 2 * (81 + 81))  # the sessions once per load round
    # the baseline's full measurement in the cache: only its sessions run again
    assert second_look_seconds(p, pair, baseline_cached=True) == pytest.approx(
        90 * grows + 100 + 2 * (81 + 81))


def test_a_second_look_over_the_policy_s_bound_is_not_taken_and_the_record_says_why() -> None:
    assert skip_reason(_plan([], None), 10 * 3600) is None  # no bound: as before
    assert skip_reason(_plan([], 60), 59 * 60) is None
    why = skip_reason(_plan([], 60), 4.5 * 3600)
    assert why is not None and "about 270 min" in why and "second_look_max_minutes (60)" in why
    looks = {**one_look(0.95, 2, "smoke"), "skipped": why}
    line = looks_line({"looks": looks})
    assert "was due, and not taken" in line and "about 270 min" in line and "0.975" in line


def test_a_second_look_past_a_tunes_deadline_is_not_taken_and_says_how_to_take_it() -> None:
    # 40 min to measure every item, within the policy's 60: taken with 41 min left, not
    # with 39, nor once the deadline has passed
    assert skip_reason(_plan([], 60, deadline=1000.0 + 41 * 60), 40 * 60, now=1000.0) is None
    why = skip_reason(_plan([], 60, deadline=1000.0 + 39 * 60), 40 * 60, now=1000.0)
    assert why is not None and "about 40 min" in why and "39 min left" in why
    assert "--max-hours" in why and "again with more hours" in why
    late = skip_reason(_plan([], None, deadline=1000.0), 60, now=5000.0)
    assert late is not None and "0 min left" in late
    # the policy's bound is the first reason where both hold
    both = skip_reason(_plan([], 30, deadline=1000.0), 40 * 60, now=5000.0)
    assert both is not None and "second_look_max_minutes (30)" in both


def test_evaluate_skips_a_due_second_look_over_the_bound_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from workbench.pipeline import evaluate

    p = _plan(["arithmetic"], 30)
    p.growing_runs = lambda: {"arithmetic"}  # type: ignore[method-assign]
    p.at_profile = lambda profile: p  # type: ignore[method-assign]
    monkeypatch.setattr(evaluate, "baseline_entry", lambda plan: tmp_path / "not-cached")
    first = SimpleNamespace(decision="inconclusive", policy={"looks": one_look(0.95, 2, "smoke")},
                            gates=[_gate("quality", "arithmetic", "inconclusive")])
    console = Console(record=True, width=300)
    pair = _pair({"arithmetic": 600}, {"arithmetic": 900}, (700, 1000))
    assert evaluate._second_look(p, pair, first, tmp_path, console,  # type: ignore[arg-type]
                                 remeasure=False, measure_all=False) is None
    skipped = first.policy["looks"]["skipped"]
    assert "second_look_max_minutes (30)" in skipped
    text = " ".join(console.export_text().split())
    assert "no second look" in text and "quality:arithmetic" in text and "stays inconclusive" \
        in text
    assert not (tmp_path / "look-1").exists()  # the first look's files stay where they are
    # under the bound, the same run takes its second look (measured by measure_planned)
    monkeypatch.setattr(evaluate, "measure_planned", lambda *a, **k: "measured")
    del first.policy["looks"]["skipped"]
    p.policy = GatePolicy(second_look=True, second_look_max_minutes=600)
    taken = evaluate._second_look(p, _pair({"arithmetic": 600}, {}, (700, 0)), first,
                                  tmp_path, console, remeasure=False,  # type: ignore[arg-type]
                                  measure_all=False)
    assert taken is not None and taken[1] == "measured" and "skipped" not in first.policy["looks"]
