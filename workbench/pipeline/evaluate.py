"""`workbench evaluate`, top to bottom: plan -> quantise -> measure baseline and candidate
-> judge -> record -> log. Each stage's result is saved in the run folder as it completes,
so a failed run keeps what it measured (docs/architecture.md).
"""

from __future__ import annotations

import functools
import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from rich.console import Console
from rich.markup import escape

from workbench.config.run_config import RunConfig
from workbench.gate.early import EarlyStop, decisiveness
from workbench.gate.looks import (
    FIRST_LOOK_DIR,
    FirstLook,
    Looks,
    one_look,
    planned_looks,
    second_look_due,
)
from workbench.gate.verdict import judge, token_fidelity
from workbench.measure.judge import JudgeRun, judge_pair
from workbench.measure.pair import ROLES, MeasuredPair, baseline_entry, measure_pair
from workbench.measure.watch import WatchFor
from workbench.mechanisms.errors import InfraError
from workbench.mechanisms.files import new_run_dir, write_json
from workbench.mechanisms.timing import current, span, timeline
from workbench.pipeline.look_cost import second_look_seconds, skip_reason
from workbench.pipeline.quantize import quantize_planned
from workbench.plan.plan import Outputs, Plan, plan
from workbench.record.build import build_record
from workbench.record.decision import DecisionRecord
from workbench.record.render import print_decision, write_record
from workbench.record.sections import judge_json
from workbench.record.store import POLICY_FILE, keep_first_look
from workbench.suites.results import SuiteResult
from workbench.tracking.run_log import (
    log_run,
    mlflow_section,
    run_params,
    tracker_for,
    tracking_line,
)
from workbench.tracking.shared_copy import PRIVATE_FILE, private_runs
from workbench.tracking.tracker import Tracker

__all__ = ["evaluate_planned", "measure_planned", "run_evaluate"]


@contextmanager
def stage(name: str, folder: Path, kind: str = "stage") -> Iterator[None]:
    """A stage, timed into the run's timeline (timing.json). A file-system failure inside
    it (disk full, a folder made read-only mid-run) becomes an infrastructure error naming
    the stage and the path (the file when the error knows it, else the folder the stage
    writes in), not a bare OSError."""
    try:
        with span(name, kind):
            yield
    except OSError as err:
        if isinstance(err, (ConnectionError, TimeoutError)):
            raise
        where = err.filename or f"in {folder}"
        raise InfraError(f"{name}: cannot write {where}: {err.strerror or err}") from err


def run_evaluate(cfg: RunConfig, candidate: str, runs_root: Path, console: Console,
                 outputs: Outputs | None = None, remeasure: bool = False,
                 measure_all: bool = False) -> DecisionRecord:
    """The main job: every input checked (exit 2 before anything is written), then one
    candidate evaluated into a new run folder."""
    p = plan(cfg, candidate, outputs or Outputs(runs_dir=runs_root))
    return evaluate_planned(p, new_run_dir(runs_root, candidate), console, remeasure,
                            measure_all=measure_all)


def _earlier_records(runs_root: Path, limit: int = 200) -> list[dict]:
    """The decision records of the runs beside this one, the newest first (their folders
    start with the time), at most `limit`: how often each suite decided them orders the
    next candidate's suites. An unreadable one is passed over."""
    records = []
    for file in sorted(runs_root.glob("*/decision.json"), reverse=True)[:limit]:
        try:
            records.append(json.loads(file.read_text()))
        except (OSError, ValueError):
            continue
    return records


def early_stop(p: Plan, run_dir: Path, looks: int) -> WatchFor:
    """The candidate's watch for this plan (gate/early.py): judged at the level of each of
    the run's `looks`, on the half of the items the decision reads, fidelity from both
    models' log-probabilities in the run folder."""
    by_run = {name: s for s in p.suites for name, _ in s.spec.runs()}

    def restrict(name: str, result: SuiteResult) -> SuiteResult:
        return p.split.restrict(result, by_run[name]) if p.split and name in by_run \
            else result

    def fidelity(measured: set[str]) -> dict:
        return token_fidelity([s for s in p.suites if s.name in measured], run_dir,
                              p.split.keeps if p.split else None)

    history = decisiveness(_earlier_records(run_dir.parent))

    def watch(baseline_suites: dict[str, SuiteResult]) -> EarlyStop:
        return EarlyStop(p.policy.for_look(looks), baseline_suites, p.device, p.cfg.seed,
                         1 + len(p.cfg.load.also), restrict, fidelity, history)

    return watch


def measure_planned(p: Plan, run_dir: Path, console: Console, remeasure: bool,
                    looks: int = 1, measure_all: bool = True) -> MeasuredPair:
    """The stages that need an engine: quantise, then measure the pair, the candidate
    stopped once it has failed past doubt at the level of each of the run's `looks`
    (unless measure_all). A sweep fanned out on Ray runs this in a task on the candidate's
    devices (sweep/fanout.py). A plan judged on half of the items (p.split) hands on only
    that half: the run folder and the cache keep every item, nothing downstream sees the
    other half."""
    with stage("quantise", run_dir, "quantise"):
        artifact = quantize_planned(p, run_dir, console)
    watch = None if measure_all else early_stop(p, run_dir, looks)
    with stage("measure", run_dir):
        return measure_pair(p, artifact, run_dir, console, remeasure,
                            watch).restricted(p.split, p.suites)


def _keep_inputs(p: Plan, run_dir: Path) -> None:
    """The config and the policy the run was judged under, for `workbench gate` and
    `workbench log` later."""
    (run_dir / "config.yaml").write_text(yaml.safe_dump(p.cfg.model_dump(mode="json")))
    shutil.copyfile(p.cfg.resolve(p.cfg.gates), run_dir / POLICY_FILE)
    # the suites whose answers MLflow gets as hashes, as they were when the run was made
    # (`workbench log` sends the folder later, when a suite may have changed or be gone)
    write_json(run_dir / PRIVATE_FILE, sorted(private_runs(p.suites)))


def _with_judge(p: Plan, pair: MeasuredPair, run_dir: Path, console: Console
                ) -> tuple[MeasuredPair, JudgeRun | None]:
    """The judge model's verdicts on the traffic suites' answers, where one is declared
    (measure/judge.py)."""
    judge_cfg = p.cfg.judge
    if judge_cfg is None:
        return pair, None
    with stage("judge model", run_dir):
        return judge_pair(pair, p.suites, judge_cfg, p.cfg.resolve(judge_cfg.rubric),
                          p.cfg.seed, run_dir, console)


def _judge_and_record(p: Plan, pair: MeasuredPair, run_dir: Path, tracker: Tracker,
                      looks: Looks, judged: JudgeRun | None) -> DecisionRecord:
    with stage("judge and record", run_dir, "judge"):
        fidelity = token_fidelity(p.suites, run_dir, p.split.keeps if p.split else None)
        dense = pair.artifact.dense
        report = judge(p.policy, p.cfg.resolve(p.cfg.gates), pair.baseline, pair.candidate,
                       fidelity, p.device, run_dir, p.cfg.seed, looks,
                       dense.not_own if dense else None)
        rec = build_record(p, pair, report, fidelity, run_dir, mlflow_section(tracker))
        rec.judge = None if judged is None else judge_json(judged)
        write_record(run_dir, rec)
        _write_timing(run_dir)
    return rec


def _write_timing(run_dir: Path) -> None:
    """timing.json: every stage's span, seconds per kind, the engine-busy share
    (mechanisms/timing.py)."""
    line = current()
    if line is not None:
        write_json(run_dir / "timing.json", line.to_json())


def _first_look(p: Plan, handed_over: bool) -> Looks:
    """The run's plan of looks, fixed before the first is judged (gate/looks.py): two when
    the policy allows a second look and a suite has items the sample leaves out, unless
    the pair was measured elsewhere (a Ray task hands over one look)."""
    planned = planned_looks(p.policy.second_look and not handed_over, p.growing_runs())
    return one_look(p.policy.confidence, planned, p.cfg.profile)


def _second_look(p: Plan, pair: MeasuredPair, first: DecisionRecord, run_dir: Path,
                 console: Console, remeasure: bool, measure_all: bool
                 ) -> tuple[Plan, MeasuredPair, Looks] | None:
    """Every item measured, when the first look left gates open that more items could
    decide and failed none (gate/looks.py); the first look's measurements and record are
    kept in look-1/. None when no second look is due."""
    looks = first.policy["looks"]
    open_gates = second_look_due(looks, first.decision, first.gates, p.growing_runs())
    if not open_gates:
        return None
    shown = ", ".join(open_gates[:4]) + (" …" if len(open_gates) > 4 else "")
    skipped = _too_long(p, pair)
    if skipped is not None:
        looks["skipped"] = skipped  # the record written next says it
        console.print(f"[bold]no second look[/]: the {p.cfg.profile} sample left "
                      f"{len(open_gates)} gate(s) open ({escape(shown)}), but "
                      f"{escape(skipped)}; the decision stays {first.decision}")
        return None
    console.print(f"[bold]second look[/]: the {p.cfg.profile} sample left "
                  f"{len(open_gates)} gate(s) open that more items can decide "
                  f"({escape(shown)}) and "
                  f"failed none; measuring every item (profile full), both looks judged at "
                  f"confidence {looks['confidence_per_look']:g} (docs/gates.md, 'Two looks')")
    with stage("second look", run_dir):
        keep_first_look(run_dir)
    full = p.at_profile("full")
    pair = measure_planned(full, run_dir, console, remeasure, looks=2,
                           measure_all=measure_all)
    return full, pair, Looks(
        planned=2, taken=2, policy_confidence=looks["policy_confidence"],
        confidence_per_look=looks["confidence_per_look"],
        profiles=[p.cfg.profile, "full"],
        first_look=FirstLook(profile=p.cfg.profile, decision=first.decision,
                             open_gates=open_gates, folder=FIRST_LOOK_DIR))


def _too_long(p: Plan, pair: MeasuredPair) -> str | None:
    """Why the due second look is not taken (pipeline/look_cost.py); None: it is."""
    full_baseline_cached = baseline_entry(p.at_profile("full")).exists()
    return skip_reason(p, second_look_seconds(p, pair, full_baseline_cached))


def evaluate_planned(p: Plan, run_dir: Path, console: Console, remeasure: bool = False,
                     parent: Tracker | None = None,
                     measured: Callable[[], MeasuredPair] | None = None,
                     measure_all: bool = True) -> DecisionRecord:
    """One candidate against its baseline, its inputs already checked (plan()): quantise,
    measure the pair, judge, record, log. `sweep` calls this for each of its candidates,
    as a child run of the sweep's MLflow run (parent); a fanned-out sweep passes
    `measured`, which hands over what a Ray task measured (or raises what it failed with).
    measure_all: measure every suite and the load test even once a gate has failed past
    doubt (`evaluate --measure-all`); sweep and tune stop their candidates there."""
    with timeline():
        return _evaluate(p, run_dir, console, remeasure, parent, measured, measure_all)


def _evaluate(p: Plan, run_dir: Path, console: Console, remeasure: bool,
              parent: Tracker | None, measured: Callable[[], MeasuredPair] | None,
              measure_all: bool) -> DecisionRecord:
    _keep_inputs(p, run_dir)
    console.print(f"run folder {run_dir} · device {p.device} · engine {p.engine_version}")
    if p.dense is not None:  # said first, and again beside the decision (the record)
        console.print(f"[bold yellow]served dense:[/] {escape(p.dense.line)}")
    started = time.perf_counter()
    tags = {"candidate": p.candidate_name, "device": p.device,
            **({"served": "dense"} if p.dense else {})}
    with tracker_for(p.cfg, p.candidate_name, tags, console, parent) as tracker:
        tracker.log_params(run_params(p, run_dir))
        try:
            first = _first_look(p, handed_over=measured is not None)
            measure = measured or functools.partial(measure_planned, p, run_dir, console,
                                                    remeasure, first["planned"], measure_all)
            pair, judged = _with_judge(p, measure(), run_dir, console)
            rec = _judge_and_record(p, pair, run_dir, tracker, first, judged)
            looked_again = _second_look(p, pair, rec, run_dir, console, remeasure,
                                        measure_all)
            if looked_again is not None:
                p, pair, looks = looked_again
                pair, judged = _with_judge(p, pair, run_dir, console)
                rec = _judge_and_record(p, pair, run_dir, tracker, looks, judged)
            with span("MLflow: metrics, runs, registry", "log"):
                log_run(tracker, rec, {role: pair.side(role) for role in ROLES},
                        [(s.name, s.path, s.digest) for s in p.suites])
        finally:
            _write_timing(run_dir)  # a failed run's too: where its time went
            with span("MLflow: artifacts", "log"):  # partial results too, when one failed
                tracker.log_run_folder(run_dir, private_runs(p.suites))
    rec.mlflow.update(tracker.status())
    write_record(run_dir, rec)
    _write_timing(run_dir)
    print_decision(rec, console)
    console.print(f"decision record: {run_dir / 'decision.json'} · MLflow "
                  f"{tracking_line(tracker, run_dir)} · {time.perf_counter() - started:.0f}s")
    return rec
