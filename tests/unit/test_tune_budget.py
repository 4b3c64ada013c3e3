"""The tune's price for its next trial: its first look at worst (a second look is held to
what is left of the budget when it is due, pipeline/look_cost.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from workbench.config.run_config import load_config
from workbench.plan.plan import Outputs, plan
from workbench.suites.split import ItemSplit
from workbench.sweep.table import SweepRow
from workbench.tune.budget import next_trial_s, trial_price

DEFAULT = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"


def row(seconds: float | None, looks: int = 1, measured_now: bool = True) -> SweepRow:
    return SweepRow(candidate="t", status="decided", decision="reject", looks=looks,
                    evaluate_s=seconds, measured_now=measured_now)


def _timeline(folder: Path, wall: float, spans: list[dict]) -> Path:
    (folder / "timing.json").write_text(json.dumps({"wall_time_s": wall, "spans": spans}))
    return folder


def test_a_one_look_trial_is_priced_at_its_own_time_no_second_look_added() -> None:
    assert next_trial_s([row(568.0)]) == 568.0


def test_a_two_look_trial_without_a_timeline_is_priced_at_what_it_took() -> None:
    assert next_trial_s([row(2089.0, looks=2)]) == 2089.0


def test_the_dearest_trial_sets_the_price_not_the_last() -> None:
    # the overrun of issue 23: a cheap last trial must not hide a dear one before it
    assert next_trial_s([row(900.0), row(100.0)]) == 900.0
    assert next_trial_s([row(3000.0, looks=2), row(500.0)]) == 3000.0


def test_cached_trials_and_no_trials_cost_nothing() -> None:
    assert next_trial_s([]) == 0.0
    assert next_trial_s([row(568.0, measured_now=False), row(None)]) == 0.0


def test_a_trial_is_priced_by_its_first_look_without_the_baselines_suites(
        tmp_path: Path) -> None:
    # the default tune's first trial (issue 23): 949 s, of which the baseline's suites
    # 319 s (measured once, then cached) and the candidate's 267 s
    _timeline(tmp_path, 949, [
        {"name": "quantise", "kind": "quantise", "start_s": 0, "seconds": 91},
        {"name": "baseline: arithmetic", "kind": "suite", "start_s": 91, "seconds": 319},
        {"name": "candidate: arithmetic", "kind": "suite", "start_s": 500, "seconds": 267}])
    first = dataclasses.replace(row(949.0), run_dir=str(tmp_path))
    assert next_trial_s([first]) == pytest.approx(949 - 319)


def test_a_two_look_trial_is_priced_by_where_its_second_look_began(tmp_path: Path) -> None:
    # keep16 of issue 23: 2,089 s in all, its second look begun at 900 s; the baseline's
    # suites of both looks leave the price (the next trial finds them cached)
    _timeline(tmp_path, 2089, [
        {"name": "baseline: arithmetic", "kind": "suite", "start_s": 50, "seconds": 300},
        {"name": "candidate: arithmetic", "kind": "suite", "start_s": 400, "seconds": 250},
        {"name": "second look", "kind": "stage", "start_s": 900, "seconds": 1},
        {"name": "baseline: arithmetic", "kind": "suite", "start_s": 950, "seconds": 500},
        {"name": "candidate: arithmetic", "kind": "suite", "start_s": 1500, "seconds": 500}])
    twice = dataclasses.replace(row(2089.0, looks=2), run_dir=str(tmp_path))
    assert trial_price(twice) == pytest.approx(900 - 300)
    assert next_trial_s([twice, row(700.0)]) == 700.0


def test_a_resumed_tune_prices_a_trial_whose_baseline_came_from_the_cache(
        tmp_path: Path) -> None:
    _timeline(tmp_path, 568, [
        {"name": "quantise", "kind": "quantise", "start_s": 0, "seconds": 91},
        {"name": "candidate: arithmetic", "kind": "suite", "start_s": 91, "seconds": 267}])
    assert next_trial_s([dataclasses.replace(row(568.0), run_dir=str(tmp_path))]) == 568.0


def test_a_trial_stopped_early_is_priced_as_a_whole_one_until_one_ran_in_full() -> None:
    """A stopped trial measured part of what the next one may: it is grown to every suite
    run and a load test for each model (a minute each without a timeline showing one);
    once a trial of this tune was measured in full, that one sets the price."""
    stopped = dataclasses.replace(row(120.0), stopped_by=["quality:arithmetic"],
                                  not_measured=["long-context", "load test"])
    assert next_trial_s([stopped], suite_runs=4) == 120.0 * 4 / 3 + 2 * 60.0
    assert next_trial_s([stopped, row(500.0)], suite_runs=4) == 500.0
    assert next_trial_s([dataclasses.replace(stopped, evaluate_s=900.0), row(500.0)],
                        suite_runs=4) == 500.0


def test_a_stopped_trial_adds_the_load_test_its_timeline_shows(tmp_path: Path) -> None:
    _timeline(tmp_path, 200, [
        {"name": "baseline: arithmetic", "kind": "suite", "start_s": 10, "seconds": 30.0},
        {"name": "candidate: arithmetic", "kind": "suite", "start_s": 50, "seconds": 40.0},
        {"name": "baseline: load test", "kind": "load", "start_s": 100, "seconds": 90.0}])
    stopped = SweepRow(candidate="t", status="decided", decision="reject", evaluate_s=200.0,
                       measured_now=True, run_dir=str(tmp_path), stopped_by=["q"],
                       not_measured=["long-context", "load test"])
    # its time (200 s less the baseline's cached suites: 170 s), its candidate's suites
    # (40 s) grown by 2 runs over 1, and a 90 s load test for each model: its build and
    # engine starts do not grow with the suites it left
    assert next_trial_s([stopped], suite_runs=2) == 170.0 + 40.0 + 2 * 90.0
    # two load rounds: each model's second in a session of its own, a start (one minute
    # where the timeline shows none) and a load test more
    assert next_trial_s([stopped], suite_runs=2, rounds=2) == \
        170.0 + 40.0 + 2 * 2 * 90.0 + 2 * 60.0


def test_a_stopped_trial_on_every_core_adds_its_load_sessions_starts(tmp_path: Path) -> None:
    """Its suites on every core, each model's load test would have started an engine of its
    own (measure/sessions.py): two more starts, as long as its longest."""
    _timeline(tmp_path, 200, [
        {"name": "baseline: engine start", "kind": "engine_start", "start_s": 0, "seconds": 45.0},
        {"name": "candidate: arithmetic", "kind": "suite", "start_s": 50, "seconds": 40.0}])
    stopped = SweepRow(candidate="t", status="decided", decision="reject", evaluate_s=200.0,
                       measured_now=True, run_dir=str(tmp_path), stopped_by=["q"],
                       not_measured=["long-context", "load test"])
    vllm = next_trial_s([stopped], suite_runs=2)
    (tmp_path / "decision.json").write_text(json.dumps({"device": {
        "suite_binding": "every-core"}}))
    assert next_trial_s([stopped], suite_runs=2) == vllm + 2 * 45.0


def test_a_search_trial_carries_the_tunes_deadline_into_its_second_look() -> None:
    p = plan(load_config(DEFAULT), "int4", Outputs(runs_dir=None))
    trial = p.variant(p.cfg, "int4", ItemSplit("search", 0), look_deadline=1234.0)
    assert trial.look_deadline == 1234.0
    assert trial.at_profile("full").look_deadline == 1234.0  # the second look's own plan
    assert p.variant(p.cfg, "int4", None).look_deadline is None


def test_a_trial_stopped_in_its_second_look_is_priced_by_its_whole_first_look(
        tmp_path: Path) -> None:
    _timeline(tmp_path, 1500, [
        {"name": "baseline: arithmetic", "kind": "suite", "start_s": 0, "seconds": 100},
        {"name": "candidate: arithmetic", "kind": "suite", "start_s": 100, "seconds": 50},
        {"name": "second look", "kind": "stage", "start_s": 150, "seconds": 1},
        {"name": "candidate: arithmetic", "kind": "suite", "start_s": 600, "seconds": 400}])
    stopped = dataclasses.replace(row(1500.0, looks=2), run_dir=str(tmp_path),
                                  stopped_by=["quality:arithmetic"],
                                  not_measured=["long-context", "load test"])
    # its first look was whole: not grown by the suites its second look left out
    assert next_trial_s([stopped], suite_runs=4) == pytest.approx(150 - 100)


def _built(folder: Path, name: str, build: float, suites: float,
           source: str = "built") -> SweepRow:
    folder.mkdir()
    (folder / "quantize.json").write_text(json.dumps({"source": source}))
    _timeline(folder, build + suites, [
        {"name": f"quantise {name}", "kind": "quantise", "start_s": 0, "seconds": build},
        {"name": "candidate: arithmetic", "kind": "suite", "start_s": build,
         "seconds": suites}])
    return SweepRow(candidate=name, status="decided", decision="reject",
                    evaluate_s=build + suites, measured_now=True, run_dir=str(folder))


def test_the_next_trial_is_priced_with_a_build_of_its_own_method(tmp_path: Path) -> None:
    """An AWQ build on two cores takes several times a GPTQ one: after a slow AWQ trial, the
    next GPTQ point is priced with the GPTQ build measured here, not the AWQ one."""
    gptq = _built(tmp_path / "g", "int4", 190.0, 900.0)
    awq = _built(tmp_path / "a", "int4-awq", 1700.0, 300.0)
    method = {"int4": "gptq", "int4-awq": "awq", "int4-gptq-asym": "gptq"}
    rows = [gptq, awq]
    assert next_trial_s(rows) == 2000.0  # the dearest trial, its build and all
    for next_one, price in (("int4-gptq-asym", 900.0 + 190.0), ("int4-awq", 900.0 + 1700.0)):
        assert next_trial_s(rows, 0, lambda name, m=method[next_one]: method[name] == m) \
            == price
    # a method none of the trials was built with: the dearest trial as it was
    assert next_trial_s(rows, 0, lambda name: False) == 2000.0


def test_a_build_found_in_the_cache_does_not_price_the_next_one(tmp_path: Path) -> None:
    """A point built before its trial (ranked, or from an earlier tune) took seconds to
    find: the next point of its method is priced as the dearest trial, build and all."""
    awq = _built(tmp_path / "a", "int4-awq", 900.0, 300.0)
    cached = _built(tmp_path / "g", "int4", 2.0, 500.0, source="cache")
    method = {"int4": "gptq", "int4-awq": "awq", "int4-gptq-asym": "gptq"}
    assert next_trial_s([awq, cached], 0, lambda name: method[name] == "gptq") == 1200.0
