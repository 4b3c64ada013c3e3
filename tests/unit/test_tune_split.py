"""Tune's halves of the items and its record: the search and confirmation halves partition
every suite, a result restricted to a half is summed up again from its items alone, tune's
own input errors exit 2 with nothing written, and tune.json matches its published schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from workbench.cli import main
from workbench.suites.definition import load_suite
from workbench.suites.results import ItemResult, summarise
from workbench.suites.split import ItemSplit
from workbench.sweep.table import SweepRecord, SweepRow, rank
from workbench.tune.budget import Budget
from workbench.tune.record import (
    SCHEMA_FILE,
    Outcome,
    SensitivityJson,
    TuneRecord,
    tune_schema,
    validate_tune,
    write_tune,
)
from workbench.tune.trials import TrialSpec

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "configs" / "default.yaml"


@given(ids=st.sets(st.text(min_size=1, max_size=12), max_size=60), seed=st.integers(0, 9))
def test_the_two_halves_partition_the_items(ids: set[str], seed: int) -> None:
    search, confirm = ItemSplit("search", seed), ItemSplit("confirm", seed)
    for item_id in ids:
        assert search.keeps(item_id) != confirm.keeps(item_id)


def test_the_halves_are_near_even_and_fixed_by_the_seed() -> None:
    ids = [f"item-{i}" for i in range(2000)]
    kept = [i for i in ids if ItemSplit("search", 0).keeps(i)]
    assert 900 < len(kept) < 1100
    assert kept == [i for i in ids if ItemSplit("search", 0).keeps(i)]
    assert kept != [i for i in ids if ItemSplit("search", 1).keeps(i)]


def test_a_restricted_result_is_summed_up_from_its_half_alone(tmp_path: Path) -> None:
    suite = load_suite("arithmetic")
    items = [ItemResult(it.id, tuple(it.slices), "h", "r", float(n % 3 == 0), 0.1, 4)
             for n, it in enumerate(suite.items)]
    whole = summarise(suite, items, tmp_path / "items.jsonl")
    half = ItemSplit("search").restrict(whole, suite)
    expected = [i for i in items if ItemSplit("search").keeps(i.id)]
    assert half.n == len(expected) < whole.n
    assert half.accuracy == sum(i.score for i in expected) / len(expected)
    assert sum(s["n"] for s in half.slices.values()) <= sum(
        s["n"] for s in whole.slices.values())


def test_tune_refuses_a_recipe_without_an_integer_grid_and_a_bad_budget(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    result = CliRunner().invoke(main, ["tune", "--config", str(DEFAULT), "--candidate", "int8",
                                       "--runs-dir", str(runs)])
    assert result.exit_code == 2
    assert "tune.space: candidates.int8 is w8a8-int8; a space of recipes varies an integer " \
        "weight-only recipe (w4a16, w8a16)" in result.output
    result = CliRunner().invoke(main, ["tune", "--config", str(DEFAULT), "--candidate", "int4",
                                       "--runs-dir", str(runs), "--max-trials", "0"])
    assert result.exit_code == 2 and "--max-trials: 0 (at least 1)" in result.output
    assert not runs.exists()


def test_validate_with_tune_refuses_what_tune_refuses(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    args = ["--config", str(DEFAULT), "--candidate", "int8", "--runs-dir", str(runs)]
    tuned = CliRunner().invoke(main, ["tune", *args])
    validated = CliRunner().invoke(main, ["validate", "--tune", *args])
    assert validated.exit_code == tuned.exit_code == 2
    assert validated.output == tuned.output  # the same check, the same words
    assert CliRunner().invoke(main, ["validate", *args]).exit_code == 0  # evaluate's alone
    ok = CliRunner().invoke(main, ["validate", "--tune", *args[:3], "int4"])
    assert ok.exit_code == 0, ok.output
    no_candidate = CliRunner().invoke(main, ["validate", "--tune", "--config", str(DEFAULT)])
    assert no_candidate.exit_code == 2 and "--tune: needs --candidate NAME" in no_candidate.output
    assert not runs.exists()


def test_the_tune_record_matches_its_published_schema(tmp_path: Path) -> None:
    # `python -m workbench.tune.record` rewrites the file when the types change
    assert json.loads(SCHEMA_FILE.read_text()) == tune_schema()
    rows = [SweepRow("int4", "decided", decision="reject", quality=-0.3, efficiency=80e6,
                     failing_gates=["fidelity:heldout-text:kl_mean"]),
            SweepRow("int4-keep1", "decided", decision="promote", quality=-0.01,
                     efficiency=90e6)]
    front, recommendation = rank(rows, "weights")
    trials = SweepRecord("m", "cpu", "gates.yaml", "weights", "worst_lower_bound", "words",
                         {"weights": 270e6}, rows, front, recommendation, str(tmp_path), "now")
    sens = SensitivityJson(method="kl", bits=4, group_size=64, passages=8, tokens=900,
                           ranked=[{"block": 2, "kl_mean": 0.7, "top1_agreement": 0.3}],
                           seconds=3.0, cache_hit=False)
    record = TuneRecord("m", "int4", "cpu", "gates.yaml", sens,
                        {"int4": [], "int4-keep1": [2]}, trials, "settled", 6, 2.0, "halves",
                        rows[1], Outcome("confirmed", "why", "int4-keep1", [2]),
                        str(tmp_path), "now")
    write_tune(tmp_path, record)
    data = json.loads((tmp_path / "tune.json").read_text())
    validate_tune(data)
    assert data["exit_code"] == 0 and (tmp_path / "tune.png").is_file()
    assert "**Tuned: `int4-keep1`** keeps blocks [2]" in (tmp_path / "tune.md").read_text()


def test_the_trial_confirmed_is_the_best_promoted_on_the_objective() -> None:
    """On weights the fewest kept blocks win; on cost a larger k that serves cheaper can;
    a rejected trial is never picked however cheap it is."""
    from workbench.sweep.table import rank
    from workbench.tune.run import Search, pick_trial

    search = Search(rows={
        0: SweepRow("int4", "decided", decision="reject", quality=-0.3, efficiency=0.1),
        1: SweepRow("int4-keep1", "decided", decision="promote", quality=-0.02,
                    efficiency=0.5),
        2: SweepRow("int4-keep2", "decided", decision="promote", quality=-0.01,
                    efficiency=0.4)})
    rows = list(search.rows.values())
    for objective, expected in (("weights", 1), ("cost", 2)):
        for r in rows:  # weights grow with k; on cost keep2 happens to serve cheaper
            r.efficiency = {"int4": 80.0, "int4-keep1": 90.0, "int4-keep2": 100.0}[
                r.candidate] if objective == "weights" else {
                "int4": 0.1, "int4-keep1": 0.5, "int4-keep2": 0.4}[r.candidate]
        front, recommendation = rank(rows, objective)  # type: ignore[arg-type]
        table = SweepRecord("m", "cpu", "g", objective, "worst_lower_bound",  # type: ignore[arg-type]
                            "w", {}, rows, front, recommendation, "d", "now")
        assert pick_trial(search, table) == expected


def test_a_rejected_best_trial_is_said_to_fail_only_the_gates_it_failed() -> None:
    """None promoted: the record names the gates the best trial fails, and counts the ones
    its sample left open instead of listing them as failures; a trial that fails nothing
    is held back by the gates it did not settle."""
    from workbench.tune.outcome import Search, none_promoted

    rejected = SweepRow("int4-keep4", "decided", decision="reject",
                        failing_gates=["health:(pooled)"],
                        inconclusive_gates=["quality:arithmetic", "safety:overrefusal"])
    outcome = none_promoted(Search(rows={0: SweepRow(
        "int4", "decided", decision="reject",
        failing_gates=["health:(pooled)", "health:arithmetic"]), 4: rejected}))
    assert outcome.still_failing == ["health:(pooled)"]
    assert "`int4-keep4` (4 kept), is reject: fails health:(pooled); 2 more not settled" \
        in outcome.reason and "quality:arithmetic" not in outcome.reason
    undecided = SweepRow("int4-keep8", "decided", decision="inconclusive",
                         inconclusive_gates=["quality:arithmetic"])
    outcome = none_promoted(Search(rows={8: undecided}))
    assert outcome.still_failing == ["quality:arithmetic"]
    assert outcome.reason.endswith("is inconclusive: not shown within margin: quality:arithmetic")


def test_a_space_no_point_of_which_the_model_takes_is_refused_up_front(tmp_path: Path) -> None:
    """SmolLM2's widths (576) take no group of 128: a space of that group alone is exit 2
    in `validate --tune` and `tune` alike, naming the point and why, nothing written."""
    text = DEFAULT.read_text().replace("group_sizes: [128, 64, 32]", "group_sizes: [128]")
    assert text != DEFAULT.read_text()
    config = DEFAULT.parent / f".{tmp_path.name}.yaml"  # beside it: its paths are relative
    config.write_text(text)
    try:
        args = ["--config", str(config), "--candidate", "int4", "--runs-dir",
                str(tmp_path / "runs")]
        tuned = CliRunner().invoke(main, ["tune", *args])
        validated = CliRunner().invoke(main, ["validate", "--tune", *args])
    finally:
        config.unlink()
    assert tuned.exit_code == validated.exit_code == 2, tuned.output
    assert "tune.space: no point of the space can be built and served here: " \
           "int4-gptq-sym-g128: group size 128 does not divide" in " ".join(tuned.output.split())
    assert not (tmp_path / "runs").exists()


def test_tune_measure_all_reaches_every_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    """`tune --measure-all` measures each trial in full: the flag travels in the budget to
    the trial's evaluate (measure_all=True), and by default trials are stopped early."""
    import importlib

    from workbench.tune import run as tune_run

    tune_cli = importlib.import_module("workbench.cli.tune")  # the module, not the command

    seen: list[bool] = []
    deadlines: list[float | None] = []

    def fake_row(*args, measure_all: bool = False, **kwargs) -> SweepRow:
        seen.append(measure_all)
        return SweepRow("t", "decided", decision="reject")

    monkeypatch.setattr(tune_run, "evaluate_row", fake_row)

    class FakePlan:
        cfg = type("C", (), {"seed": 0})()
        policy = type("P", (), {"sweep": type("S", (), {"quality": "worst_lower_bound"})()})()

        def variant(self, *args, look_deadline=None):
            deadlines.append(look_deadline)
            return self

    budgets: list[Budget] = []
    monkeypatch.setattr(tune_cli, "run_tune", lambda cfg, name, runs, con, budget: (
        budgets.append(budget), type("R", (), {"exit_code": 0})())[1])
    for flags in ([], ["--measure-all"]):
        result = CliRunner().invoke(main, ["tune", "--config", str(DEFAULT), "--candidate",
                                           "int4", *flags])
        assert result.exit_code == 0, result.output
        monkeypatch.setattr(tune_run, "trial_config", lambda cfg, spec: cfg)
        tune_run._trial(FakePlan(), TrialSpec("t", None, (), "x"),  # type: ignore[arg-type]
                        Path("/nonexistent"), Console(quiet=True), None,  # type: ignore[arg-type]
                        budgets[-1], 99.0)
    assert [b.measure_all for b in budgets] == [False, True] and seen == [False, True]
    # a search trial's second look is held to the tune's deadline; a confirmation's is not
    assert deadlines == [99.0, 99.0]
    tune_run._trial(FakePlan(), TrialSpec("t", None, (), "x"),  # type: ignore[arg-type]
                    Path("/nonexistent"), Console(quiet=True), None,  # type: ignore[arg-type]
                    budgets[-1], 99.0, part="confirm")
    assert deadlines[-1] is None
