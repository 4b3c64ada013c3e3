"""The MLflow layout the tracker writes, on a throwaway sqlite store."""

from __future__ import annotations

from pathlib import Path

from workbench.config.run_config import TrackingConfig
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
