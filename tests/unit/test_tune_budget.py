"""The tune's price for its next trial: the worst case, a second look included."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from workbench.config.run_config import load_config
from workbench.plan.plan import Outputs, plan
from workbench.sweep.table import SweepRow
from workbench.tune.budget import next_trial_s, second_look_growth, trial_price

DEFAULT = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"


def row(seconds: float | None, looks: int = 1, measured_now: bool = True) -> SweepRow:
    return SweepRow(candidate="t", status="decided", decision="reject", looks=looks,
                    evaluate_s=seconds, measured_now=measured_now)


def test_a_one_look_trial_is_priced_as_if_it_had_looked_twice() -> None:
    assert next_trial_s([row(568.0)], growth=4.3) == 568.0 * 4.3


def test_a_two_look_trial_is_priced_at_what_it_took() -> None:
    assert next_trial_s([row(2089.0, looks=2)], growth=4.3) == 2089.0


def test_the_dearest_trial_sets_the_price_not_the_last() -> None:
    # the overrun of issue 23: a cheap last trial must not hide a dear one before it
    rows = [row(900.0, looks=1), row(100.0, looks=1)]
    assert next_trial_s(rows, growth=2.0) == 1800.0
    assert next_trial_s([row(3000.0, looks=2), row(500.0)], growth=4.3) == 3000.0


def test_cached_trials_and_no_trials_cost_nothing() -> None:
    assert next_trial_s([], growth=4.3) == 0.0
    assert next_trial_s([row(568.0, measured_now=False), row(None)], growth=4.3) == 0.0


def test_a_policy_of_one_look_prices_the_trial_at_its_own_time() -> None:
    assert next_trial_s([row(568.0)], growth=1.0) == 568.0


def test_the_growth_of_a_second_look_counts_the_default_configs_items() -> None:
    cfg = load_config(DEFAULT)
    p = plan(cfg, "int4", Outputs(runs_dir=None))
    sample = every = 0
    for s in p.suites:
        runs = len(list(s.spec.runs()))
        sample += runs * len(s.sample(cfg.profile, cfg.seed))
        every += runs * len(s.sample("full", cfg.seed))
    assert cfg.profile == "smoke" and every > sample
    assert second_look_growth(p) == 1 + every / sample
    one_look = plan(cfg.with_profile("full"), "int4", Outputs(runs_dir=None))
    assert second_look_growth(one_look) == 1.0  # every item already: nothing to grow


def test_a_trial_is_priced_from_where_its_time_went(tmp_path: Path) -> None:
    # the default tune's first trial (issue 23): 949 s, of which the baseline's suites
    # 319 s (measured once, then cached) and the candidate's 267 s
    spans = [{"name": "quantise", "kind": "quantise", "start_s": 0, "seconds": 91},
             {"name": "baseline: arithmetic", "kind": "suite", "start_s": 91, "seconds": 319},
             {"name": "candidate: arithmetic", "kind": "suite", "start_s": 500, "seconds": 267}]
    (tmp_path / "timing.json").write_text(json.dumps({"wall_time_s": 949, "spans": spans}))
    first = dataclasses.replace(row(949.0), run_dir=str(tmp_path))
    # a first look without the baseline's suites, and a second look's suites on both sides
    assert next_trial_s([first], growth=4.3) == pytest.approx(949 - 319 + (267 + 319) * 3.3)
    # once a trial of the tune has looked twice, the baseline's every item is cached
    twice = dataclasses.replace(row(2089.0, looks=2), run_dir=str(tmp_path))
    assert next_trial_s([first, twice], growth=4.3) == pytest.approx(2089.0)
    assert next_trial_s([dataclasses.replace(first, evaluate_s=100.0), twice], growth=4.3) \
        == pytest.approx(2089.0)
    cheaper = dataclasses.replace(first, looks=1)
    assert trial_price(cheaper, 4.3, looked_twice=True) == pytest.approx(949 - 319 + 267 * 3.3)


def test_a_resumed_tune_prices_the_baselines_second_look_it_did_not_measure(
        tmp_path: Path) -> None:
    # resumed: the baseline's suites came from the cache, so this trial's timeline has none;
    # a second look still answers the baseline's remaining items, priced at the candidate's
    spans = [{"name": "quantise", "kind": "quantise", "start_s": 0, "seconds": 91},
             {"name": "candidate: arithmetic", "kind": "suite", "start_s": 91, "seconds": 267}]
    (tmp_path / "timing.json").write_text(json.dumps({"wall_time_s": 568, "spans": spans}))
    resumed = dataclasses.replace(row(568.0), run_dir=str(tmp_path))
    assert next_trial_s([resumed], growth=4.3) == pytest.approx(568 + (267 + 267) * 3.3)


def test_a_trial_stopped_early_is_priced_as_a_whole_one_until_one_ran_in_full() -> None:
    """A stopped trial measured part of what the next one may: it is grown to every suite
    run and a load test for each model (a minute each without a timeline showing one);
    once a trial of this tune was measured in full, that one sets the price."""
    stopped = dataclasses.replace(row(120.0), stopped_by=["quality:arithmetic"],
                                  not_measured=["long-context", "load test"])
    assert next_trial_s([stopped], growth=1.0, suite_runs=4) == 120.0 * 4 / 3 + 2 * 60.0
    assert next_trial_s([stopped, row(500.0)], growth=1.0, suite_runs=4) == 500.0
    assert next_trial_s([dataclasses.replace(stopped, evaluate_s=900.0), row(500.0)],
                        growth=1.0, suite_runs=4) == 500.0


def test_a_stopped_trial_adds_the_load_test_its_timeline_shows(tmp_path: Path) -> None:
    (tmp_path / "timing.json").write_text(json.dumps({"spans": [
        {"name": "baseline: arithmetic", "kind": "suite", "seconds": 30.0},
        {"name": "candidate: arithmetic", "kind": "suite", "seconds": 40.0},
        {"name": "baseline: load test", "kind": "load", "seconds": 90.0}]}))
    stopped = SweepRow(candidate="t", status="decided", decision="reject", evaluate_s=200.0,
                       measured_now=True, run_dir=str(tmp_path), stopped_by=["q"],
                       not_measured=["long-context", "load test"])
    # its price (200 s less the baseline's cached suites: 170 s), its candidate's suites
    # (40 s) grown by 2 runs over 1, and a 90 s load test for each model: its build and
    # engine starts do not grow with the suites it left
    assert next_trial_s([stopped], growth=1.0, suite_runs=2) == 170.0 + 40.0 + 2 * 90.0
    # with a second look: both models' suites at the trial's whole size, grown again, and
    # never dearer than the policy's second_look_max_minutes, past which none is taken
    grown = 170.0 + 40.0 + (40.0 * 2 + 30.0) * 3.0 + 2 * 90.0
    assert next_trial_s([stopped], growth=4.0, suite_runs=2) == pytest.approx(grown)
    assert next_trial_s([stopped], growth=4.0, suite_runs=2, second_look_cap_s=100.0) == \
        pytest.approx(170.0 + 40.0 + 100.0 + 2 * 90.0)
