"""Two looks at the items (gate/looks.py): when a second look is due and at what level
each look is judged. How often two looks promote a worse candidate, by simulation through
the real gates: benchmarks/two_looks.py (docs/gates.md, "Two looks")."""

from __future__ import annotations

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
