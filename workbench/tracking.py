"""MLflow logging: one run per `evaluate`, started first so that a failure marks it FAILED."""

from __future__ import annotations

import os
import re
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
