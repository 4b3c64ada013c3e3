"""MLflow logging: one parent run per `evaluate`, started first so that a failure marks it
FAILED, with a nested run per model; the suites as dataset inputs; the candidate as a
registered model version carrying its decision.

MLflow is a record of the run, never what decides it (docs/reliability.md): the tracking
server is checked up front (plan/checks.py), its client retries briefly, and a server lost
mid-run is reported once, after which nothing more is sent; the record says what was not
logged, and `workbench log RUN_DIR` logs it later. A run left RUNNING by a workbench that
was killed is marked KILLED by the next run on the same host.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

from workbench.config.run_config import TrackingConfig, tracking_uri
from workbench.mechanisms.processes import pid_alive
from workbench.record.sections import (
    CHALLENGER,
    CHAMPION,
    PREVIOUS_CHAMPION,
    MlflowSection,
    Registry,
)
from workbench.tracking.shared_copy import shareable

if TYPE_CHECKING:
    from mlflow import MlflowClient

__all__ = ["Tracker", "metric_name"]

P = ParamSpec("P")
R = TypeVar("R")

# A lost server should cost seconds, not MLflow's default of 7 retries with a 120 s timeout
# each (18 minutes were measured); the user's own settings win.
CLIENT_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
                   "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                   # MLflow's INFO lines (creating database tables, ...) are its own
                   # housekeeping; its warnings still reach the console
                   "MLFLOW_LOGGING_LEVEL": "WARNING"}


# MLflow accepts only these characters in a metric name; suite and slice labels are free text.
_NOT_IN_METRIC_NAME = re.compile(r"[^\w\-. :/]", re.ASCII)


def metric_name(name: str) -> str:
    """The name as MLflow accepts it: other characters become '_'."""
    return _NOT_IN_METRIC_NAME.sub("_", name)


def _version_under(client: MlflowClient, model: str, alias: str) -> str:
    """The version an alias of the registered model points at, or "" when it has none."""
    from mlflow.exceptions import MlflowException

    try:
        return str(client.get_model_version_by_alias(model, alias).version)
    except MlflowException:
        return ""


def _tolerant(method: Callable[Concatenate[Tracker, P], R]
              ) -> Callable[Concatenate[Tracker, P], R | None]:
    """Once the server is lost, every later call is skipped and counted; the first failure
    is remembered (Tracker.lost) rather than raised."""

    @functools.wraps(method)
    def call(self: Tracker, *args: P.args, **kwargs: P.kwargs) -> R | None:
        if self.lost is not None:
            self.skipped.append(method.__name__)
            return None
        try:
            return method(self, *args, **kwargs)
        except Exception as err:  # noqa: BLE001 - MLflow must not decide the run
            first_line = (str(err).splitlines() or [""])[0][:300]
            self.lost = f"{type(err).__name__}: {first_line}"
            self.skipped.append(method.__name__)
            self.on_lost(self.lost)
            return None

    return call


class Tracker:
    """Context manager around an MLflow run; the run ends FAILED if the block raises."""

    def __init__(self, cfg: TrackingConfig, run_name: str, tags: dict[str, str],
                 on_lost: Callable[[str], None] = lambda _reason: None,
                 enabled: bool = True, parent: Tracker | None = None) -> None:
        self.cfg = cfg
        self.run_name = run_name
        self.tags = tags
        self.run_id = ""
        self.uri = tracking_uri(cfg)
        self.experiment_id = ""
        self.on_lost = on_lost
        self.lost: str | None = None if enabled else "tracking disabled (tracking.required: " \
                                                      "false and the server did not answer)"
        self.skipped: list[str] = []
        self.not_sent: str | None = None  # artifacts left unlogged, the server still there
        self.marked_stale: list[str] = []
        self.parent = parent  # a sweep's run: this one is its child

    def ui_link(self) -> str:
        """Where the MLflow UI shows this run's experiment on its runs: the full URL for a
        tracking server; for a local store, the page to open in `mlflow ui`. MLflow 3.17's
        UI opens an experiment on its GenAI views unless the link asks for the runs
        (`workflowType=machine_learning`; the experiment tag alone is not enough there)."""
        page = f"#/experiments/{self.experiment_id}/runs?workflowType=machine_learning"
        if self.uri.startswith(("http://", "https://")):
            return f"{self.uri.rstrip('/')}/{page}"
        return page

    def status(self) -> MlflowSection:
        """What the record says of MLflow: complete, or what was not logged and why."""
        if self.lost is None and self.not_sent is not None:
            return MlflowSection(status="incomplete", error=self.not_sent,
                                 not_logged=["log_run_folder"],
                                 log_later="workbench log <run folder>")
        if self.lost is None:
            return MlflowSection(status="complete")
        return MlflowSection(status="incomplete", error=self.lost,
                             not_logged=sorted(set(self.skipped)),
                             log_later="workbench log <run folder>")

    def __enter__(self) -> Tracker:
        for key, value in CLIENT_DEFAULTS.items():
            os.environ.setdefault(key, value)
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        self._start()
        self._mark_stale_runs()
        return self

    @_tolerant
    def _start(self) -> None:
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
        # MLflow 3's UI opens an experiment on its GenAI (traces) views unless told that its
        # runs are the point (the UI bundle reads this tag when it picks the views)
        mlflow.MlflowClient().set_experiment_tag(self.experiment_id, "mlflow.experimentKind",
                                                 "custom_model_development")
        owner = {"workbench.host": socket.gethostname(), "workbench.pid": str(os.getpid())}
        # a child starts while its parent's run is the active one: nested under it
        run = mlflow.start_run(experiment_id=self.experiment_id, run_name=self.run_name,
                               tags={**self.tags, **owner}, nested=self.parent is not None)
        self.run_id = run.info.run_id

    @_tolerant
    def _mark_stale_runs(self) -> None:
        """Runs of this experiment still RUNNING whose workbench process on this host is
        gone (killed with SIGKILL, or the machine lost power): marked KILLED, saying so."""
        from mlflow import MlflowClient

        client = MlflowClient()
        host = socket.gethostname()
        running = client.search_runs(
            [self.experiment_id], "attributes.status = 'RUNNING' and "
            f"tags.`workbench.host` = '{host}'", max_results=200)
        for run in running:
            pid = run.data.tags.get("workbench.pid", "")
            if run.info.run_id == self.run_id or not pid.isdigit() or pid_alive(int(pid)):
                continue
            client.set_tag(run.info.run_id, "failure", f"the workbench process ({pid}) ended "
                           f"without closing this run; marked by run {self.run_id}")
            client.set_terminated(run.info.run_id, "KILLED")
            self.marked_stale.append(run.info.run_id)

    @_tolerant
    def log_params(self, params: dict[str, object]) -> None:
        import mlflow

        mlflow.log_params({k: str(v)[:6000] for k, v in params.items()})

    @_tolerant
    def log_metrics(self, metrics: dict[str, float]) -> None:
        import mlflow

        mlflow.log_metrics({metric_name(k): float(v) for k, v in metrics.items()})

    @_tolerant
    def set_tags(self, tags: dict[str, str]) -> None:
        import mlflow

        mlflow.set_tags(tags)

    @_tolerant
    def log_series(self, series: dict[str, list[float]]) -> None:
        """Metrics with one value per step (a load level per step, lightest first), so the
        UI draws them as curves."""
        import mlflow

        for name, values in series.items():
            for step, value in enumerate(values):
                mlflow.log_metric(metric_name(name), float(value), step=step)

    @_tolerant
    def log_steps(self, steps: dict[str, list[tuple[int, float]]]) -> None:
        """Metrics at steps of their own (a telemetry series: milliseconds into a level),
        sent in batches: one request per thousand points rather than one per point."""
        import mlflow
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        points = [Metric(metric_name(name), value, now, step)
                  for name, series in steps.items() for step, value in series]
        run = mlflow.active_run()
        if run is None:
            return
        client = mlflow.MlflowClient()
        for start in range(0, len(points), 1000):  # MLflow's limit per log_batch call
            client.log_batch(run.info.run_id, metrics=points[start:start + 1000])

    @contextmanager
    def nested(self, name: str, tags: dict[str, str]) -> Iterator[str]:
        """A child run of the current one (one per model); yields its id ('' when the
        server is lost: the block still runs, its calls are skipped)."""
        child = self._start_child(name, tags)
        try:
            yield str(child or "")
        finally:
            if child:
                self._end_child()

    @_tolerant
    def _start_child(self, name: str, tags: dict[str, str]) -> str:
        import mlflow

        return mlflow.start_run(run_name=name, nested=True, tags=tags,
                                experiment_id=self.experiment_id).info.run_id

    @_tolerant
    def _end_child(self) -> None:
        import mlflow

        mlflow.end_run()

    @_tolerant
    def log_suites(self, suites: list[tuple[str, Path, str]]) -> None:
        """Each suite as a dataset input (name, folder, digest): the data by reference."""
        import mlflow
        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset

        for name, folder, digest in suites:
            with warnings.catch_warnings():
                # MLflow registers its local-file source twice and warns that a file:// URI
                # matches both; it picks one and the run is the same either way: not the
                # user's to read (docs/gates.md, "MLflow")
                warnings.filterwarnings("ignore", message="The specified dataset source can "
                                        "be interpreted in multiple ways")
                source = resolve_dataset_source(folder.resolve().as_uri())
            mlflow.log_input(MetaDataset(source, name=name, digest=digest[:36]),  # type: ignore[abstract]
                             context="evaluation")

    @_tolerant
    def register_candidate(self, model: str, checkpoint: str, decision: str,
                           tags: dict[str, str], move_alias: bool = True) -> Registry:
        """A model version for the candidate, tagged with its decision and its checkpoint;
        a promotion moves the `champion` alias to it and keeps the version it moved from
        under `previous-champion` (what a rollback returns to); any other outcome sets
        `challenger` and leaves the champion where it is (docs/rollout.md).

        The version's source is the run (runs:/<id>/candidate): a tracking server refuses a
        local path outside the run's artifacts as a source; the checkpoint is a tag."""
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException

        client = MlflowClient()
        try:
            client.create_registered_model(model)
        except MlflowException:
            pass  # registered by an earlier run
        version = client.create_model_version(
            model, f"runs:/{self.run_id}/candidate", run_id=self.run_id,
            tags={**tags, "decision": decision, "checkpoint": checkpoint})
        if not move_alias:  # a sweep's child: the sweep moves `recommended` itself
            return Registry(registered_model=model, version=str(version.version), alias="")
        before = _version_under(client, model, CHAMPION)
        alias = CHAMPION if decision == "promote" else CHALLENGER
        if alias == CHAMPION and before:
            # kept before the champion moves: a run killed between the two calls leaves
            # the old champion in place, never a champion with no way back
            client.set_registered_model_alias(model, PREVIOUS_CHAMPION, before)
        client.set_registered_model_alias(model, alias, version.version)
        return Registry(registered_model=model, version=str(version.version), alias=alias,
                        champion_before=before)

    @_tolerant
    def set_alias(self, model: str, alias: str, version: str) -> None:
        from mlflow import MlflowClient

        MlflowClient().set_registered_model_alias(model, alias, version)

    @_tolerant
    def log_artifact(self, file: Path) -> None:
        import mlflow

        if file.is_file():
            mlflow.log_artifact(str(file))

    @_tolerant
    def log_artifacts(self, folder: Path) -> None:
        import mlflow

        if folder.is_dir():
            mlflow.log_artifacts(str(folder))

    def log_run_folder(self, run_dir: Path, private: set[str]) -> None:
        """A run folder as the run's artifacts, the answers of the suites that keep none
        (`private`: their result names) as keyed hashes (shared_copy.py). A copy that
        cannot be made (a full disk) leaves the artifacts unlogged and says so in status(),
        never fails the run; the server is not taken for lost."""
        if self.lost is not None:
            self.skipped.append("log_run_folder")
            return
        try:
            with shareable(run_dir, private) as folder:
                self.log_artifacts(folder)
        except (OSError, ValueError) as err:
            first_line = (str(err).splitlines() or [""])[0][:300]
            self.not_sent = f"the run folder was not logged: {type(err).__name__}: {first_line}"

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self._end("FINISHED", None)
        else:
            interrupted = issubclass(exc_type, KeyboardInterrupt)
            self._end("KILLED" if interrupted else "FAILED", f"{exc_type.__name__}: {exc}")

    @_tolerant
    def _end(self, status: str, failure: str | None) -> None:
        import mlflow

        if failure is not None:
            mlflow.set_tag("failure", failure[:5000])
            if self.run_name.endswith(" · running"):  # named at its end, which never came
                mlflow.set_tag("mlflow.runName", self.run_name.removesuffix(" · running")
                               + (" · interrupted" if status == "KILLED" else " · failed"))
        mlflow.end_run(status)
