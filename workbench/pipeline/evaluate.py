"""`workbench evaluate`, top to bottom: plan -> quantise -> measure baseline and candidate
-> judge -> record -> log. Each stage's result is saved in the run folder as it completes,
so a failed run keeps what it measured (docs/architecture.md).
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from rich.console import Console

from workbench.config.run_config import RunConfig
from workbench.gate.verdict import judge, token_fidelity
from workbench.measure.pair import ROLES, MeasuredPair, measure_pair
from workbench.mechanisms.errors import InfraError
from workbench.mechanisms.files import new_run_dir, write_json
from workbench.pipeline.quantize import quantize_planned
from workbench.plan.plan import Outputs, Plan, plan
from workbench.record.build import build_record
from workbench.record.decision import DecisionRecord
from workbench.record.render import print_decision, write_record
from workbench.record.store import POLICY_FILE
from workbench.tracking.run_log import (
    log_run,
    mlflow_section,
    run_params,
    tracker_for,
    tracking_line,
)
from workbench.tracking.tracker import Tracker

__all__ = ["evaluate_planned", "measure_planned", "run_evaluate"]


@contextmanager
def stage(name: str, folder: Path) -> Iterator[None]:
    """A file-system failure inside a stage (disk full, a folder made read-only mid-run)
    becomes an infrastructure error naming the stage and the path (the file when the
    error knows it, else the folder the stage writes in), not a bare OSError."""
    try:
        yield
    except OSError as err:
        if isinstance(err, (ConnectionError, TimeoutError)):
            raise
        where = err.filename or f"in {folder}"
        raise InfraError(f"{name}: cannot write {where}: {err.strerror or err}") from err


def run_evaluate(cfg: RunConfig, candidate: str, runs_root: Path, console: Console,
                 outputs: Outputs | None = None, remeasure: bool = False) -> DecisionRecord:
    """The main job: every input checked (exit 2 before anything is written), then one
    candidate evaluated into a new run folder."""
    p = plan(cfg, candidate, outputs or Outputs(runs_dir=runs_root))
    return evaluate_planned(p, new_run_dir(runs_root, candidate), console, remeasure)


def measure_planned(p: Plan, run_dir: Path, console: Console, remeasure: bool
                    ) -> MeasuredPair:
    """The stages that need an engine: quantise, then measure the pair. A sweep fanned out
    on Ray runs this in a task on the candidate's devices (sweep/fanout.py)."""
    with stage("quantise", run_dir):
        artifact = quantize_planned(p, run_dir, console)
    with stage("measure", run_dir):
        return measure_pair(p, artifact, run_dir, console, remeasure)


def _keep_inputs(p: Plan, run_dir: Path) -> None:
    """The config and the policy the run was judged under, for `workbench gate` and
    `workbench log` later."""
    (run_dir / "config.yaml").write_text(yaml.safe_dump(p.cfg.model_dump(mode="json")))
    shutil.copyfile(p.cfg.resolve(p.cfg.gates), run_dir / POLICY_FILE)


def _judge_and_record(p: Plan, pair: MeasuredPair, run_dir: Path, tracker: Tracker,
                      started: float) -> DecisionRecord:
    with stage("record", run_dir):
        fidelity = token_fidelity(p.suites, run_dir)
        report = judge(p.policy, p.cfg.resolve(p.cfg.gates), pair.baseline, pair.candidate,
                       fidelity, p.device, run_dir, p.cfg.seed)
        rec = build_record(p, pair, report, fidelity, run_dir, mlflow_section(tracker))
        write_record(run_dir, rec)
        write_json(run_dir / "timing.json",
                   {"wall_time_s": round(time.perf_counter() - started, 2)})
    return rec


def evaluate_planned(p: Plan, run_dir: Path, console: Console, remeasure: bool = False,
                     parent: Tracker | None = None,
                     measured: Callable[[], MeasuredPair] | None = None) -> DecisionRecord:
    """One candidate against its baseline, its inputs already checked (plan()): quantise,
    measure the pair, judge, record, log. `sweep` calls this for each of its candidates,
    as a child run of the sweep's MLflow run (parent); a fanned-out sweep passes
    `measured`, which hands over what a Ray task measured (or raises what it failed with)."""
    _keep_inputs(p, run_dir)
    console.print(f"run folder {run_dir} · device {p.device} · engine {p.engine_version}")
    started = time.perf_counter()
    tags = {"candidate": p.candidate_name, "device": p.device}
    with tracker_for(p.cfg, p.candidate_name, tags, console, parent) as tracker:
        tracker.log_params(run_params(p, run_dir))
        try:
            measure = measured or functools.partial(measure_planned, p, run_dir, console,
                                                    remeasure)
            pair = measure()
            rec = _judge_and_record(p, pair, run_dir, tracker, started)
            log_run(tracker, rec, {role: pair.side(role) for role in ROLES},
                    [(s.name, s.path, s.digest) for s in p.suites])
        finally:
            tracker.log_artifacts(run_dir)  # partial results too, when a stage failed
    rec.mlflow.update(tracker.status())
    write_record(run_dir, rec)
    print_decision(rec, console)
    console.print(f"decision record: {run_dir / 'decision.json'} · MLflow "
                  f"{tracking_line(tracker, run_dir)} · {time.perf_counter() - started:.0f}s")
    return rec
