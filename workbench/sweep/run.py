"""Which candidate to ship: every candidate against one baseline, on one table and one
Pareto front, with a recommendation.

Each candidate goes through exactly evaluate's stages (pipeline.evaluate_planned) into
its own folder, `runs/<sweep>/<candidate>/`, with its own decision record and MLflow child
run; the baseline's suites are measured once (its cache entry), and every candidate's
measurement is cached with the baseline load session it was measured beside, so a sweep
run again measures only what is missing. The ranking reads only the decision records.

Quality retained is the worst lower bound of a gated suite's paired delta (candidate
minus baseline, at the policy's confidence): what the evidence guarantees at worst. The
efficiency objective is the policy's `sweep.objective`. A rejected candidate is never on
the front or recommended, whatever it costs: a broken model is often the cheapest.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from workbench.config.gate_policy import GatePolicy, Objective, QualityMeasure
from workbench.config.run_config import RunConfig
from workbench.mechanisms.errors import (
    InfraError,
    InputError,
)
from workbench.mechanisms.files import inside, new_run_dir
from workbench.pipeline.evaluate import evaluate_planned
from workbench.plan.plan import Outputs, Plan, check_candidates, plan
from workbench.quantize.checks import unsupported_here
from workbench.quantize.formats import emulated_rate, format_of_candidate
from workbench.record.sections import MlflowSection
from workbench.record.store import load_record
from workbench.serve.engine import detect_device
from workbench.sweep.fanout import Cluster, connect, fan_out, leave
from workbench.sweep.report import PARETO_PLOT, print_sweep, render_sweep, write_sweep
from workbench.sweep.table import (
    OBJECTIVE_LABEL,
    QUALITY_LABEL,
    RayTask,
    SweepRecord,
    SweepRow,
    objective_value,
    rank,
    row_of,
)
from workbench.tracking.run_log import DESCRIPTION_TAG, RUN_NAME_TAG, tracker_for
from workbench.tracking.tracker import Tracker

__all__ = ["baseline_figures", "choose", "evaluate_row", "generated_tokens", "run_sweep",
           "table_record"]


# ---- figures of one decided candidate, read from its record ---------------------------


# ---- the front and the recommendation ---------------------------------------------------


# ---- running it -------------------------------------------------------------------------

@dataclass
class _Chosen:
    plans: list[Plan]
    skipped: list[SweepRow]


def generated_tokens(p: Plan) -> int:
    """Output tokens one model's evaluation generates at most: every generating suite's
    items at their max_tokens, and each gated load profile's requests at every level and
    round."""
    tokens = sum(len(s.sample(p.cfg.profile, p.cfg.seed)) * s.spec.max_tokens
                 for s in p.suites if s.generates)
    profiles = {p.cfg.load.profile: p.requests, **p.further}
    return tokens + sum(sum(r.output_tokens for r in requests)
                        * len(p.cfg.load.profiles[name].levels)
                        for name, requests in profiles.items()) * p.cfg.load.rounds


def _estimated_seconds(p: Plan, rate: float) -> float:
    """The candidate's evaluation at the emulated rate (a lower bound: prompts are free)."""
    return generated_tokens(p) / rate


def choose(cfg: RunConfig, names: list[str], outputs: Outputs, device: str,
           include_slow: bool, cluster: Cluster | None = None) -> _Chosen:
    """Every named candidate checked up front (exit 2 on a bad one, before any work);
    those this device cannot serve, or serves only by slow emulation, set aside."""
    check_candidates(cfg, names, outputs, serving=False)
    skipped, serving = [], []
    for name in names:
        reason = unsupported_here(cfg, name, device)
        if reason:
            skipped.append(SweepRow(name, "skipped", f"unsupported on {device}: {reason}"))
        else:
            serving.append(name)
    plans = []
    for name in serving:
        offered = (cluster.per_node, cluster.total, cluster.where) if cluster else None
        p = plan(cfg, name, outputs, device, offered)
        fmt = format_of_candidate(p.candidate)
        rate = emulated_rate(fmt, device) if fmt is not None else None
        if rate is not None and not include_slow:
            hours = _estimated_seconds(p, rate) / 3600
            skipped.append(SweepRow(name, "skipped", f"{fmt.label if fmt else ''} is emulated "
                                    f"on {device} (about {rate:g} output tokens/s): an "
                                    f"estimated {hours:.1f} h; --include-slow measures it"))
            continue
        plans.append(p)
    return _Chosen(plans, skipped)


def run_sweep(cfg: RunConfig, names: list[str], runs_root: Path, console: Console,
              include_slow: bool = False, remeasure: bool = False,
              ray_address: str | None = None) -> SweepRecord:
    """Every candidate against one baseline: here one after another, or with ray_address
    (a cluster's address, or 'local' for this host) in parallel Ray tasks (fanout.py)."""
    outputs = Outputs(runs_dir=runs_root)
    cluster = _join(cfg, names, outputs, ray_address) if ray_address else None
    device = cluster.device if cluster else detect_device()
    try:
        chosen = choose(cfg, names, outputs, device, include_slow, cluster)
    except BaseException:
        if cluster is not None:
            leave(cluster)
        raise
    for row in chosen.skipped:
        console.print(f"[yellow]-[/] {escape(row.candidate)} skipped: {escape(row.reason)}")
    if not chosen.plans:
        raise InputError(f"{cfg.source}: none of {', '.join(names)} can be measured on "
                         f"{device} (each is skipped above)")
    policy = chosen.plans[0].policy
    sweep_dir = new_run_dir(runs_root, "sweep")
    console.print(f"sweep folder {sweep_dir}: {len(chosen.plans)} candidates "
                  f"({', '.join(p.candidate_name for p in chosen.plans)}), objective "
                  f"{policy.sweep.objective}")
    started = time.perf_counter()
    tags = {"kind": "sweep", "device": device,
            "candidates": ",".join(p.candidate_name for p in chosen.plans)}
    with tracker_for(cfg, "sweep", tags, console) as tracker:
        rows = _measure_all(chosen.plans, cluster, sweep_dir, console, remeasure, tracker)
        rows += chosen.skipped
        record = _sweep_record(cfg, device, policy, rows, sweep_dir, started, tracker, cluster)
        write_sweep(sweep_dir, record)
        _log_sweep(tracker, record, sweep_dir)
    record.mlflow.update(tracker.status())
    write_sweep(sweep_dir, record)
    print_sweep(record, console)
    return record


def _measure_all(plans: list[Plan], cluster: Cluster | None, sweep_dir: Path,
                 console: Console, remeasure: bool, tracker: Tracker) -> list[SweepRow]:
    """Each candidate through evaluate's stages: one after another here, or fanned out."""
    objective, quality = plans[0].policy.sweep.objective, plans[0].policy.sweep.quality
    if cluster is not None:
        return fan_out(plans, cluster, remeasure, console, lambda p, m, task: replace(
            evaluate_row(p, inside(sweep_dir, p.candidate_name), console, remeasure,
                          tracker, objective, quality, m), ray_task=RayTask(**task)))
    rows = []
    for i, p in enumerate(plans, 1):
        console.rule(f"candidate {i} of {len(plans)}: {p.candidate_name}")
        rows.append(evaluate_row(p, inside(sweep_dir, p.candidate_name), console,
                                  remeasure, tracker, objective, quality))
    return rows


def _sweep_record(cfg: RunConfig, device: str, policy: GatePolicy, rows: list[SweepRow],
                  sweep_dir: Path, started: float, tracker: Tracker,
                  cluster: Cluster | None) -> SweepRecord:
    record = table_record(cfg, device, policy, rows, sweep_dir, started,
                          policy.sweep.objective, policy.sweep.quality)
    record.mlflow = MlflowSection(tracking_uri=tracker.uri, run_id=tracker.run_id,
                                  experiment_id=tracker.experiment_id, ui=tracker.ui_link())
    record.fanned_out = cluster.where if cluster else None
    return record


def table_record(cfg: RunConfig, device: str, policy: GatePolicy, rows: list[SweepRow],
                 folder: Path, started: float, objective: Objective,
                 quality: QualityMeasure, judged_on: str = "") -> SweepRecord:
    """The rows ranked into a table: the front, the recommendation, the baseline's figures
    (tune's trials are such a table too; judged_on: which items, when not all)."""
    front, recommendation = rank(rows, objective)
    return SweepRecord(
        model=cfg.model.name, device=device, policy=str(cfg.resolve(cfg.gates)),
        objective=objective, quality=quality,
        quality_measure=f"{QUALITY_LABEL[quality]}{judged_on} (policy sweep.quality: "
                        f"{policy.sweep.quality}, confidence {policy.confidence})",
        baseline=baseline_figures(rows, objective), rows=rows, front=front,
        recommendation=recommendation, sweep_dir=str(folder),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        wall_time_s=round(time.perf_counter() - started, 1),
        baseline_misses=sorted({g for r in rows for g in r.baseline_misses}))


def _join(cfg: RunConfig, names: list[str], outputs: Outputs, address: str) -> Cluster:
    """The Ray cluster a fanned-out sweep runs on, joined after the checks that need no
    device (a bad config is exit 2 before Ray is touched)."""
    if cfg.endpoints.baseline is not None or cfg.endpoints.candidate is not None:
        raise InputError(f"{cfg.source}: endpoints: a sweep fanned out on Ray measures what "
                         "it serves itself (an endpoint's key would travel in Ray's task "
                         "environment); run it without --ray-address")
    check_candidates(cfg, names, outputs, serving=False)
    return connect(address)


def evaluate_row(p: Plan, run_dir: Path, console: Console, remeasure: bool,
                  parent: Tracker, objective: Objective, quality: QualityMeasure,
                  measured_in: Callable[[Path], Any] | None = None,
                  measure_all: bool = False) -> SweepRow:
    """measured_in: what a Ray task measured, handed over into run_dir (fanout.py);
    None: measured here. measure_all: not stopped where a gate fails past doubt."""

    run_dir.mkdir()
    started = time.perf_counter()
    handed = functools.partial(measured_in, run_dir) if measured_in is not None else None
    try:
        rec = evaluate_planned(p, run_dir, console, remeasure, parent=parent, measured=handed,
                               measure_all=measure_all)
    except InputError as err:  # found only after building (a recipe_file's format)
        return SweepRow(p.candidate_name, "skipped", str(err), run_dir=str(run_dir))
    except InfraError as err:
        console.print(f"[red]✗[/] {escape(p.candidate_name)}: {escape(str(err))}; the sweep "
                      "goes on with the next candidate")
        return SweepRow(p.candidate_name, "failed", str(err), run_dir=str(run_dir))
    return row_of(rec, objective, quality, round(time.perf_counter() - started, 1),
                  not rec.reused.get("measurement_pair", False))


def baseline_figures(rows: list[SweepRow], objective: Objective) -> dict[str, float | None]:

    # a candidate stopped early or served dense ran no load test beside its cached baseline
    decided = next((r for r in rows if r.status == "decided" and not r.stopped_by
                    and not r.served_dense), None)
    if decided is None:
        return {}
    rec = load_record(Path(decided.run_dir))
    return {name: objective_value(rec, name, "baseline")  # type: ignore[arg-type]
            for name in OBJECTIVE_LABEL}


# ---- writing it -------------------------------------------------------------------------


def _log_sweep(tracker: Tracker, record: SweepRecord, sweep_dir: Path) -> None:
    """The parent run: a figure per candidate, the table and plot, the recommendation as a
    tag and as the `recommended` alias of its model version."""
    metrics: dict[str, float] = {"candidates": len(record.rows),
                                 "promoted": sum(r.decision == "promote" for r in record.rows)}
    for r in record.rows:
        for key in ("quality", "efficiency"):
            value = getattr(r, key)
            if value is not None:
                metrics[f"{r.candidate}.{key}"] = value
    tracker.log_metrics(metrics)
    best_name = record.recommendation.candidate
    tracker.set_tags({"recommended": best_name or "none",
                      "objective": record.objective, "front": ",".join(record.front),
                      RUN_NAME_TAG: f"sweep · {len(record.rows)} candidates · "
                                    + (f"recommends {best_name}" if best_name
                                       else "none promoted"),
                      DESCRIPTION_TAG: render_sweep(record)})
    for name in ("sweep.json", "sweep.md", PARETO_PLOT):
        tracker.log_artifact(sweep_dir / name)
    best = next((r for r in record.rows if r.candidate == record.recommendation.candidate),
                None)
    if best is not None:
        version = json.loads((Path(best.run_dir) / "decision.json").read_text()).get(
            "mlflow", {}).get("registry", {}).get("version")
        if version:
            tracker.set_alias(record.model, "recommended", version)
            record.mlflow["registry"] = {"registered_model": record.model, "version": version,
                                         "alias": "recommended"}
