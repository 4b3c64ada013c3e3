"""The run's timeline: spans recorded where they run, only inside a timeline, a failed
stage's time kept, and the engine-busy share."""

from __future__ import annotations

import time

import pytest

from workbench.mechanisms.timing import span, timeline


def test_spans_land_in_the_current_timeline_with_their_kind_and_busy_share() -> None:
    with span("outside any run", "suite"):
        pass  # no timeline: the block just runs
    with timeline() as line:
        with span("baseline: engine start", "engine_start"):
            time.sleep(0.05)
        with span("baseline: arithmetic", "suite"):
            time.sleep(0.1)
        with pytest.raises(RuntimeError), span("baseline: load test", "load"):
            time.sleep(0.05)
            raise RuntimeError("engine died")
    out = line.to_json()
    assert [s["name"] for s in out["spans"]] == ["baseline: engine start",
                                                 "baseline: arithmetic", "baseline: load test"]
    assert out["by_kind"]["suite"] == pytest.approx(0.1, abs=0.03)
    assert out["engine_busy_s"] == pytest.approx(0.15, abs=0.04)
    assert 0.5 < out["engine_busy_share"] < 1 and out["wall_time_s"] >= 0.2
    starts = [s["start_s"] for s in out["spans"]]
    assert starts == sorted(starts) and starts[0] >= 0


def test_a_nested_timeline_is_its_own_and_the_outer_one_resumes() -> None:
    with timeline() as outer:
        with timeline() as inner, span("trial", "suite"):
            pass
        with span("after", "judge"):
            pass
    assert [s.name for s in inner.spans] == ["trial"]
    assert [s.name for s in outer.spans] == ["after"]
