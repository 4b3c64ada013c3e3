"""The MLflow layout the tracker writes, on a throwaway sqlite store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from builders import record

from workbench.config.run_config import TrackingConfig
from workbench.gate.evidence import GateOutcome
from workbench.record.decision import DecisionRecord
from workbench.record.render import render_markdown
from workbench.tracking.run_log import DESCRIPTION_LIMIT, description, log_run, run_name
from workbench.tracking.tracker import Tracker


def test_nested_runs_curves_datasets_and_the_registry(tmp_path: Path) -> None:
    import mlflow

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    suite = tmp_path / "suite"
    suite.mkdir()
    with Tracker(TrackingConfig(uri=uri, experiment="t"), "parent", {}) as tracker:
        tracker.log_suites([("arithmetic", suite, "ab" * 32)])
        with tracker.nested("candidate", {"role": "candidate"}):
            tracker.log_series({"load.output_throughput": [10.0, 30.0]})
        first = tracker.register_candidate("m", suite.as_uri(), "promote", {"candidate": "c"})
        second = tracker.register_candidate("m", suite.as_uri(), "reject", {"candidate": "d"})
    runs = mlflow.search_runs(experiment_names=["t"], output_format="list")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    (child,) = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert child.info.run_name == "candidate" and child.info.status == "FINISHED"
    history = mlflow.MlflowClient().get_metric_history(child.info.run_id,
                                                       "load.output_throughput")
    assert [(m.step, m.value) for m in history] == [(0, 10.0), (1, 30.0)]
    assert mlflow.get_run(parent.info.run_id).inputs.dataset_inputs[0].dataset.name == \
        "arithmetic"
    assert (first["alias"], second["alias"]) == ("champion", "challenger")
    client = mlflow.MlflowClient()
    assert client.get_model_version_by_alias("m", "champion").tags["decision"] == "promote"
    assert str(client.get_model_version_by_alias("m", "challenger").version) == second["version"]
    # the first champion had none before it; a rejected candidate names the one that stays
    assert first["champion_before"] == "" and second["champion_before"] == first["version"]


def test_a_promotion_keeps_the_champion_it_replaces_as_the_rollback_target(
        tmp_path: Path) -> None:
    import mlflow

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    with Tracker(TrackingConfig(uri=uri, experiment="t"), "parent", {}) as tracker:
        v1 = tracker.register_candidate("m", tmp_path.as_uri(), "promote", {})
        rejected = tracker.register_candidate("m", tmp_path.as_uri(), "reject", {})
        v3 = tracker.register_candidate("m", tmp_path.as_uri(), "promote", {})
        # a version that could not be shown good enough moves nothing
        open_ = tracker.register_candidate("m", tmp_path.as_uri(), "inconclusive", {})
    client = mlflow.MlflowClient()
    assert v3["champion_before"] == v1["version"] != v3["version"]
    assert str(client.get_model_version_by_alias("m", "champion").version) == v3["version"]
    assert str(client.get_model_version_by_alias("m", "previous-champion").version) == \
        v1["version"]
    assert open_["champion_before"] == v3["version"] and open_["alias"] == "challenger"
    assert rejected["champion_before"] == v1["version"]

    promoted = replace(record("promote"), mlflow={"registry": v3})
    assert f"Registry: `m` version {v3['version']} is now `champion`; roll back to version " \
           f"{v1['version']} (alias `previous-champion`)." in render_markdown(promoted)
    kept = replace(record("reject"), mlflow={"registry": rejected})
    assert f"version {rejected['version']} is now `challenger`; version {v1['version']} " \
           "stays `champion`." in render_markdown(kept)
    first = replace(record("promote"), mlflow={"registry": v1})
    assert "no earlier champion to roll back to" in render_markdown(first)


def _with_gates(rec: DecisionRecord, decision: str, statuses: list[str]) -> DecisionRecord:
    return replace(rec, decision=decision, gates=[
        GateOutcome(f"quality:q{i}", s, "detail", -0.05, 0.0)  # type: ignore[arg-type]
        for i, s in enumerate(statuses)])


def test_run_names_say_candidate_decision_and_why() -> None:
    rec = record("promote")
    assert run_name(_with_gates(rec, "reject", ["fail"] * 7 + ["pass"])) == \
        "int4 · reject · 7 gates failed"
    assert run_name(_with_gates(rec, "reject", ["fail", "inconclusive"])) == \
        "int4 · reject · 1 gate failed"
    assert run_name(_with_gates(rec, "inconclusive", ["inconclusive", "pass"])) == \
        "int4 · inconclusive · 1 gate inconclusive"
    assert run_name(_with_gates(rec, "promote", ["pass"] * 3 + ["not_applicable"])) == \
        "int4 · promote · 3 gates passed"


def test_a_logged_run_reads_at_a_glance_in_the_runs_table(tmp_path: Path) -> None:
    """Its name, its decision and gate counts as columns, decision.md as its description."""
    import mlflow

    rec = _with_gates(record("promote"), "reject", ["fail", "fail", "pass", "inconclusive"])
    cfg = TrackingConfig(uri=f"sqlite:///{tmp_path / 'm.db'}", experiment="t")
    with Tracker(cfg, "int4 · running", {}) as tracker:
        log_run(tracker, rec, {}, [])
    (run,) = mlflow.search_runs(experiment_names=["t"], output_format="list")
    assert run.info.run_name == "int4 · reject · 2 gates failed"
    assert run.data.tags["decision"] == "reject"
    assert run.data.tags["mlflow.note.content"] == render_markdown(rec)
    assert (run.data.metrics["gates.fail"], run.data.metrics["gates.pass"],
            run.data.metrics["gates.inconclusive"]) == (2.0, 1.0, 1.0)
    assert run.data.metrics["decision_code"] == 1.0


def test_a_long_record_is_cut_to_fit_the_description_with_a_pointer_to_the_whole() -> None:
    rec = _with_gates(record("promote"), "reject", ["fail"] * 400)
    text = description(rec)
    assert len(render_markdown(rec)) > DESCRIPTION_LIMIT >= len(text)
    assert text.endswith("decision.md in the artifacts)")


def test_a_run_that_fails_before_its_end_is_named_so(tmp_path: Path) -> None:
    import mlflow

    cfg = TrackingConfig(uri=f"sqlite:///{tmp_path / 'm.db'}", experiment="t")
    try:
        with Tracker(cfg, "int4 · running", {}):
            raise RuntimeError("engine died")
    except RuntimeError:
        pass
    (run,) = mlflow.search_runs(experiment_names=["t"], output_format="list")
    assert (run.info.run_name, run.info.status) == ("int4 · failed", "FAILED")
