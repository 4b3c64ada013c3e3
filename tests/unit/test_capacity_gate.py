"""The capacity gate on the searches' brackets: an A/A passes at a ratio below 1 by more
than the resolution and never at 1.0, a candidate that holds nothing fails, a baseline
that holds nothing is the policy's defect, and a run without a search fails closed."""

from __future__ import annotations

import json

from workbench.config.gate_policy import CapacityGate
from workbench.gate.capacity import capacity_outcome
from workbench.gate.evidence import Evidence
from workbench.loadtest.results import LoadResult


def load(*brackets: tuple[float | None, float | None]) -> LoadResult:
    """A model's load test with one search per session."""
    sessions = [LoadResult("client", {}, [], capacity={
        "knob": "request_rate", "held": held, "not_held": not_held, "tried": []})
        for held, not_held in brackets]
    return LoadResult("client", {}, [], capacity=sessions[0].capacity, rounds=sessions[1:])


def judge(base: LoadResult | None, cand: LoadResult | None, min_ratio: float):
    ev = Evidence({}, {}, base, cand, "cpu")
    return capacity_outcome(CapacityGate(min_ratio=min_ratio), ev)


def test_an_a_a_pair_passes_below_one_and_cannot_pass_at_one() -> None:
    same = load((4.0, 4.4), (4.0, 4.4))
    assert judge(same, same, 0.85).status == "pass"
    assert judge(same, same, 1.0).status == "inconclusive"


def test_the_bracket_spans_the_sessions() -> None:
    base, cand = load((4.0, 4.4)), load((4.0, 4.4), (3.6, 4.0))
    out = judge(base, cand, 0.85)
    assert out.evidence["candidate"] == [3.6, 4.4]
    # one session alone would pass (4.0 / 4.4 = 0.91); both span 3.6 / 4.4 = 0.82
    assert out.status == "inconclusive"
    assert judge(base, load((4.0, 4.4)), 0.85).status == "pass"


def test_a_candidate_that_holds_nothing_fails_and_a_baseline_that_does_is_the_policys() -> None:
    assert judge(load((4.0, 4.4)), load((None, 1.0)), 0.5).status == "fail"
    out = judge(load((None, 1.0)), load((None, 1.0)), 0.5)
    assert out.status == "inconclusive" and "the SLO is out of this device's reach" in out.detail


def test_a_search_that_never_failed_has_no_top_and_the_record_stays_json() -> None:
    out = judge(load((8.0, None)), load((8.0, None)), 0.85)
    assert out.status == "inconclusive"
    assert out.evidence["baseline"] == [8.0, None] and out.evidence["ratio_interval"][1] is None
    json.dumps(out.evidence, allow_nan=False)  # no Infinity in decision.json


def test_a_run_without_a_search_fails_closed() -> None:
    bare = LoadResult("client", {}, [])
    out = judge(bare, load((4.0, 4.4)), 0.85)
    assert out.status == "fail" and "no capacity search" in out.detail


def test_the_plot_draws_each_models_bracket_over_its_sessions(tmp_path) -> None:
    from workbench.mechanisms.plotting import pyplot
    from workbench.record.plots import _capacity_panel, plot_latency_vs_throughput

    loads = {"baseline": load((3.25, 3.5), (3.0, 3.25)), "candidate": load((3.0, None))}
    fig, ax = pyplot().subplots()
    _capacity_panel(ax, loads)
    bars = [ln.get_xdata() for ln in ax.lines if ln.get_linewidth() == 4]
    # the span of the sessions; an open top drawn to the heaviest level tried
    assert [list(b) for b in bars] == [[3.0, 3.5], [3.0, 3.0]]
    assert [t.get_text() for t in ax.texts] == ["[3, 3.5)", "≥ 3"]
    path = plot_latency_vs_throughput(loads, "t", tmp_path / "p.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
