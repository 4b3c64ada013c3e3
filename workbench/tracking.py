"""MLflow logging: one parent run per `evaluate`, started first so that a failure marks it
FAILED, with a nested run per model; the suites as dataset inputs; the candidate as a
registered model version carrying its decision."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from .config import TrackingConfig

__all__ = ["Tracker", "metric_name", "tracking_uri"]


def tracking_uri(cfg: TrackingConfig) -> str:
    """MLFLOW_TRACKING_URI wins, then the config, then ./mlflow.db (absolute, see FIELD_NOTES)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or cfg.uri or \
        f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"


# MLflow accepts only these characters in a metric name; suite and slice labels are free text.
_NOT_IN_METRIC_NAME = re.compile(r"[^\w\-. :/]", re.ASCII)


def metric_name(name: str) -> str:
    """The name as MLflow accepts it: other characters become '_'."""
    return _NOT_IN_METRIC_NAME.sub("_", name)


class Tracker:
    """Context manager around an MLflow run; the run ends FAILED if the block raises."""

    def __init__(self, cfg: TrackingConfig, run_name: str, tags: dict[str, str]) -> None:
        self.cfg = cfg
        self.run_name = run_name
        self.tags = tags
        self.run_id = ""
        self.uri = tracking_uri(cfg)
        self.experiment_id = ""

    def __enter__(self) -> Tracker:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        import mlflow

        mlflow.set_tracking_uri(self.uri)
        exp = mlflow.get_experiment_by_name(self.cfg.experiment)
        if exp is None:
            location = None
            if self.uri.startswith("sqlite:"):
                # Keep artifacts beside the database rather than wherever the cwd is later.
                location = (Path(self.uri.removeprefix("sqlite:///")).parent / "mlruns").as_uri()
            self.experiment_id = mlflow.create_experiment(self.cfg.experiment, location)
        else:
            self.experiment_id = exp.experiment_id
        run = mlflow.start_run(experiment_id=self.experiment_id, run_name=self.run_name,
                               tags=self.tags)
        self.run_id = run.info.run_id
        return self

    def log_params(self, params: dict[str, object]) -> None:
        import mlflow

        mlflow.log_params({k: str(v)[:6000] for k, v in params.items()})

    def log_metrics(self, metrics: dict[str, float]) -> None:
        import mlflow

        mlflow.log_metrics({metric_name(k): float(v) for k, v in metrics.items()})

    def set_tags(self, tags: dict[str, str]) -> None:
        import mlflow

        mlflow.set_tags(tags)

    def log_series(self, series: dict[str, list[float]]) -> None:
        """Metrics with one value per step (a load level per step, lightest first), so the
        UI draws them as curves."""
        import mlflow

        for name, values in series.items():
            for step, value in enumerate(values):
                mlflow.log_metric(metric_name(name), float(value), step=step)

    @contextmanager
    def nested(self, name: str, tags: dict[str, str]) -> Iterator[str]:
        """A child run of the current one (one per model); yields its id."""
        import mlflow

        with mlflow.start_run(run_name=name, nested=True, tags=tags,
                              experiment_id=self.experiment_id) as child:
            yield child.info.run_id

    def log_suites(self, suites: list[tuple[str, Path, str]]) -> None:
        """Each suite as a dataset input (name, folder, digest): the data by reference."""
        import mlflow
        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset

        for name, folder, digest in suites:
            source = resolve_dataset_source(folder.resolve().as_uri())
            mlflow.log_input(MetaDataset(source, name=name, digest=digest[:36]),  # type: ignore[abstract]
                             context="evaluation")

    def register_candidate(self, model: str, source: str, decision: str,
                           tags: dict[str, str]) -> dict[str, str]:
        """A model version for the candidate, tagged with its decision; a promotion moves
        the `champion` alias to it, any other outcome sets `challenger`."""
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException

        client = MlflowClient()
        try:
            client.create_registered_model(model)
        except MlflowException:
            pass  # registered by an earlier run
        version = client.create_model_version(model, source, run_id=self.run_id,
                                              tags={**tags, "decision": decision})
        alias = "champion" if decision == "promote" else "challenger"
        client.set_registered_model_alias(model, alias, version.version)
        return {"registered_model": model, "version": str(version.version), "alias": alias}

    def log_artifacts(self, folder: Path) -> None:
        import mlflow

        if folder.is_dir():
            mlflow.log_artifacts(str(folder))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        import mlflow

        if exc_type is None:
            mlflow.end_run("FINISHED")
        else:
            mlflow.set_tag("failure", f"{exc_type.__name__}: {exc}"[:5000])
            mlflow.end_run("KILLED" if exc_type is KeyboardInterrupt else "FAILED")
