"""`workbench log RUN_DIR`: a finished run folder sent to MLflow as a new run (tagged with
the folder), for a run whose tracking server was down or lost; decision.json then says so.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console

from workbench.config.run_config import load_config
from workbench.mechanisms.errors import InfraError, InputError
from workbench.plan.checks import tracking_problems
from workbench.record.decision import SCHEMA_VERSION
from workbench.record.render import write_record
from workbench.record.sections import MlflowSection
from workbench.record.store import load_record, stored_measurement
from workbench.suites.definition import find_suite_dir
from workbench.tracking.run_log import log_run
from workbench.tracking.shared_copy import stored_private_runs
from workbench.tracking.tracker import Tracker

__all__ = ["log_stored_run"]


def _suites_of(data_digests: dict[str, str], run_dir: Path) -> list[tuple[str, Path, str]]:
    """Each suite's folder where this workbench still finds it, else the run folder."""
    out = []
    for name, digest in data_digests.items():
        try:
            out.append((name, find_suite_dir(name), digest))
        except InputError:
            out.append((name, run_dir, digest))
    return out


def log_stored_run(run_dir: Path, console: Console) -> None:
    rec = load_record(run_dir)
    base, cand = stored_measurement(run_dir, "baseline"), stored_measurement(run_dir,
                                                                             "candidate")
    if base is None or cand is None:
        raise InputError(f"{run_dir}: no baseline and candidate measurement.json to log")
    cfg = load_config(run_dir / "config.yaml")
    problems = tracking_problems(cfg)
    if problems:
        raise InputError(problems[0], problems)
    tags = {"candidate": rec.candidate, "model": rec.model["name"],
            "device": rec.device.get("kind", ""), "logged_from": str(run_dir.resolve())}
    with Tracker(cfg.tracking, rec.candidate, tags) as tracker:
        log_run(tracker, rec, {"baseline": base, "candidate": cand},
                _suites_of(rec.data_digests, run_dir))
        tracker.log_run_folder(run_dir, stored_private_runs(run_dir, cfg.suites))
    if tracker.lost is not None:
        raise InfraError(f"MLflow at {tracker.uri}: {tracker.lost}")
    registry = rec.mlflow.get("registry")
    rec.mlflow = MlflowSection(tracking_uri=tracker.uri, run_id=tracker.run_id,
                               experiment_id=tracker.experiment_id)
    rec.mlflow.update(tracker.status())
    rec.mlflow["logged_later"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if registry is not None:
        rec.mlflow["registry"] = registry
    rec.schema_version = SCHEMA_VERSION  # written anew by this version (v4 gates: id null)
    write_record(run_dir, rec)
    console.print(f"logged {run_dir} to MLflow run {tracker.run_id} ({tracker.uri})")
