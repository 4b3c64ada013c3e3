"""The sweep's ranking: the front, the dominated, the recommendation and its reasons, and
the sweep record's published schema. Rows are built by hand: only the ranking is tested."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.sweep.report import render_sweep, write_sweep
from workbench.sweep.table import Recommendation, SweepRecord, SweepRow, rank, row_of


def row(name: str, decision: str, quality: float | None, efficiency: float | None,
        failing: tuple[str, ...] = ()) -> SweepRow:
    return SweepRow(name, "decided", decision=decision, quality=quality,  # type: ignore[arg-type]
                    efficiency=efficiency, failing_gates=list(failing))


def test_a_cheap_broken_candidate_is_never_on_the_front_nor_recommended() -> None:
    rows = [row("int4", "promote", -0.02, 0.30), row("int8", "promote", -0.01, 0.40),
            row("broken", "reject", -0.90, 0.05, ("fidelity:heldout-text:kl_mean",))]
    front, rec = rank(rows, "cost")
    assert front == ["int4", "int8"]  # a trade-off: int4 cheaper, int8 better quality
    assert rec.candidate == "int4" and rec.runner_up == "int8"
    assert rec.others["broken"] == "rejected: fidelity:heldout-text:kl_mean"
    assert rec.others["int8"].startswith("promoted, but $ per million output tokens")
    assert not rows[2].on_front and rows[2].dominated_by == []


def test_dominated_candidates_are_marked_with_who_dominates_them() -> None:
    rows = [row("a", "promote", 0.0, 0.2), row("b", "promote", -0.1, 0.3),
            row("c", "inconclusive", 0.0, 0.25)]
    front, rec = rank(rows, "cost")
    assert front == ["a"]
    assert rows[1].dominated_by == ["a", "c"] and rows[2].dominated_by == ["a"]
    assert rec.candidate == "a" and rec.runner_up == "b"
    assert "dominated by a, c" in rec.others["b"]


def test_higher_is_better_objectives_rank_the_other_way() -> None:
    rows = [row("slow", "promote", 0.0, 100.0), row("fast", "promote", 0.0, 250.0)]
    front, rec = rank(rows, "throughput")
    assert front == ["fast"] and rec.candidate == "fast"
    assert rows[0].dominated_by == ["fast"]


def test_without_a_promoted_candidate_nothing_is_recommended_and_each_failure_named() -> None:
    rows = [row("int4", "reject", -0.3, 0.2, ("quality:arithmetic",)),
            row("kv", "inconclusive", -0.05, 0.3),
            SweepRow("fp8", "skipped", "W8A8 is emulated on cpu")]
    rows[1].inconclusive_gates = ["quality:boolq"]
    front, rec = rank(rows, "cost")
    assert rec.candidate is None and rec.runner_up is None
    assert front == ["kv"]  # inconclusive is on the front, never recommended
    assert rec.others == {"int4": "rejected: quality:arithmetic",
                          "kv": "inconclusive: quality:boolq",
                          "fp8": "skipped: W8A8 is emulated on cpu"}
    assert "no candidate was promoted" in rec.reason


def test_a_promoted_candidate_without_a_figure_is_off_the_front() -> None:
    rows = [row("int4", "promote", -0.01, None), row("int8", "promote", -0.02, 0.5)]
    front, rec = rank(rows, "cost")
    assert front == ["int8"] and rec.candidate == "int8"
    assert "no level met the SLO" in rec.others["int4"]


def test_a_row_reads_its_figures_from_the_decision_record() -> None:
    from builders import record

    rec = record("promote")
    rec.fidelity = {"heldout-text": {"kl_mean": 0.01, "top1_agreement": 0.97}}
    rec.gates[0].evidence.update(ci_low=-0.04)
    rec.suites["arithmetic"]["comparison"] = {"(all)": {
        "delta": -0.01, "ci_low": -0.04, "ci_high": 0.02}}
    r = row_of(rec, "cost", "worst_lower_bound", 12.0, True)
    assert r.quality == pytest.approx(-0.04) and r.efficiency == pytest.approx(5.56)
    assert r.deltas["arithmetic"].ci_high == 0.02 and r.kl_mean == 0.01
    assert r.slo_level == "c1" and r.kv_capacity_ratio == 1.0 and r.throughput_ratio == 1.0
    assert row_of(rec, "cost", "top1_agreement", 12.0, True).quality == 0.97
    assert row_of(rec, "kv_capacity", "top1_agreement", None, False).efficiency == 4096


def test_the_sweep_record_matches_its_published_schema(tmp_path: Path) -> None:
    import jsonschema

    from workbench.sweep.schema import SCHEMA_FILE, sweep_schema, validate_sweep

    # `python -m workbench.sweep.schema` rewrites the file when the types change
    assert json.loads(SCHEMA_FILE.read_text()) == sweep_schema()
    rows = [row("int4", "promote", -0.02, 0.3), row("broken", "reject", -0.9, 0.1, ("g",)),
            SweepRow("fp8", "skipped", "emulated")]
    front, recommendation = rank(rows, "cost")
    record = SweepRecord("m", "cpu", "gates.yaml", "cost", "worst_lower_bound", "words",
                         {"cost": 0.5}, rows, front, recommendation, str(tmp_path), "now")
    write_sweep(tmp_path, record)
    data = json.loads((tmp_path / "sweep.json").read_text())
    validate_sweep(data)
    assert data["exit_code"] == 0 and (tmp_path / "pareto.png").is_file()
    assert "**Recommended: `int4`**" in (tmp_path / "sweep.md").read_text()
    data["rows"][0]["decision"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        validate_sweep(data)


def test_exit_codes_say_recommended_none_or_failed() -> None:
    none = Recommendation(None, None, "no candidate was promoted")
    record = SweepRecord("m", "cpu", "p", "cost", "worst_lower_bound", "w", {}, [], [], none,
                         "d", "now")
    assert record.exit_code == 1
    record.rows = [SweepRow("int4", "failed", "engine died")]
    assert record.exit_code == 3
    assert "| int4 | failed | engine died |" in render_sweep(record)


def test_a_gate_the_baseline_misses_is_said_before_the_candidates() -> None:
    floor = "structured:bfcl-simple-guided.schema_valid:floor"
    rows = [row("int8", "reject", -0.02, 0.3, (floor,)), row("int4", "reject", -0.2, 0.2,
                                                              ("quality:arithmetic", floor))]
    for r in rows:
        r.baseline_misses = [floor]
    front, recommendation = rank(rows, "cost")
    record = SweepRecord("m", "cpu", "p", "cost", "worst_lower_bound", "w", {}, rows, front,
                         recommendation, "d", "now", baseline_misses=[floor])
    text = render_sweep(record)
    headline = f"**No candidate of this model can pass this policy: `{floor}` — the baseline"
    assert headline in text and text.index(headline) < text.index("No candidate recommended")
    assert record.exit_code == 1  # still fail-closed


def test_only_inconclusive_candidates_are_said_first_to_need_more_items() -> None:
    from workbench.sweep.report import undecided_headline

    rows = [row("int8", "inconclusive", -0.09, 0.3), row("int4", "reject", -0.3, 0.2,
                                                         ("quality:arithmetic",))]
    rows[0].inconclusive_gates = ["quality:arithmetic", "safety:advbench"]
    rows[0].items_to_decide = {"quality:arithmetic": 755}
    front, rec = rank(rows, "cost")
    assert "quality:arithmetic (about 755 more items), safety:advbench" in rec.others["int8"]
    record = SweepRecord("m", "cpu", "p", "cost", "worst_lower_bound", "q", {}, rows, front,
                         rec, "/tmp/x", "now")
    head = undecided_headline(record)
    assert head.startswith("**Nothing decided for `int8`: inconclusive, not rejected.**")
    assert "`int8` `quality:arithmetic` about 755 more" in head
    md = render_sweep(record)
    assert md.index(head) < md.index("No candidate recommended")
    rows[0].looks = 2  # every item measured and still open: only larger suites decide it
    assert undecided_headline(record).startswith(
        "**Nothing decided for `int8`: inconclusive, not rejected even after a second look "
        "at every item.**")
    rows[0].decision = "promote"
    _, promoted = rank(rows, "cost")
    assert undecided_headline(SweepRecord("m", "cpu", "p", "cost", "worst_lower_bound", "q",
                                          {}, rows, front, promoted, "/tmp/x", "now")) == ""


def test_a_candidate_stopped_early_says_by_which_gate_in_its_row_and_table() -> None:
    """A sweep candidate (or tune trial) stopped early is a reject whose row names the
    gates that stopped it and what it left out, in sweep.md and tune's trial table."""
    from builders import record

    from workbench.record.sections import EarlyStopJson

    rec = record("reject")
    rec.early_stop = EarlyStopJson(after="arithmetic", gates=["quality:arithmetic"],
                                   evidence=["0.30 -> 0.05"], level="alpha 0.025 over 9 tests",
                                   not_measured=["long-context"], load_not_measured=True)
    stopped = row_of(rec, "cost", "worst_lower_bound", 40.0, True)
    stopped.candidate = "broken"
    assert stopped.stopped_by == ["quality:arithmetic"]
    assert stopped.not_measured == ["long-context", "load test"]
    full = row_of(record("promote"), "cost", "worst_lower_bound", 90.0, True)
    assert full.stopped_by == [] and full.not_measured == []
    _, rec_ = rank([stopped, full], "cost")
    md = render_sweep(SweepRecord("m", "cpu", "p", "cost", "worst_lower_bound", "q", {},
                                  [stopped, full], [], rec_, "d", "t"))
    assert "(stopped early by quality:arithmetic; not measured: long-context, load test)" \
        in md
    assert rec_.others["broken"].startswith("rejected: ")
