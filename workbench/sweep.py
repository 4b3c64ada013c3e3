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
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .config import RunConfig
from .errors import EXIT_INFRA, EXIT_PROMOTE, EXIT_REJECT, InfraError, InputError
from .fanout import Cluster, connect, fan_out, leave
from .files import inside
from .gates import Objective, QualityMeasure
from .preflight import Outputs, Plan, check_candidates, plan
from .quantize.checks import unsupported_here
from .quantize.formats import emulated_rate, format_of_candidate
from .record import DecisionRecord, write_json
from .sections import MlflowSection
from .tracking import Tracker

__all__ = ["SWEEP_SCHEMA_VERSION", "SweepRecord", "SweepRow", "generated_tokens", "rank",
           "run_sweep"]

SWEEP_SCHEMA_VERSION = 2  # 2: rows say which Ray task measured them; the cluster
PARETO_PLOT = "pareto.png"
HIGHER_IS_BETTER = {"throughput", "kv_capacity"}
OBJECTIVE_LABEL = {"cost": "$ per million output tokens at the SLO",
                   "throughput": "output tokens/s at the SLO",
                   "weights": "weights on disk (MiB)", "kv_capacity": "KV-cache tokens"}
GATED_SECTIONS = ("quality", "safety", "structured")


@dataclass
class Delta:
    delta: float
    ci_low: float
    ci_high: float


@dataclass
class SweepRow:
    """One candidate: its decision and the figures the table and the front need."""

    candidate: str
    status: Literal["decided", "skipped", "failed"]
    reason: str = ""  # skipped or failed: why
    decision: Literal["promote", "reject", "inconclusive"] | None = None
    failing_gates: list[str] = field(default_factory=list)
    inconclusive_gates: list[str] = field(default_factory=list)
    run_dir: str = ""
    format: str = ""
    weights_bytes: int | None = None
    compression_ratio: float | None = None
    kl_mean: float | None = None
    top1_agreement: float | None = None
    deltas: dict[str, Delta] = field(default_factory=dict)  # gated suite -> (all) delta
    throughput_ratio: float | None = None  # candidate / baseline, heaviest level
    slo_level: str | None = None  # heaviest load level meeting the SLO
    kv_capacity_ratio: float | None = None
    usd_per_million_at_slo: float | None = None
    build_s: float | None = None  # the quantiser's wall time when the artifact was built
    evaluate_s: float | None = None  # this candidate's evaluation in this sweep
    measured_now: bool = False  # False: its measurement came from the cache
    quality: float | None = None  # worst lower bound of a gated suite's delta
    efficiency: float | None = None  # the objective's value
    on_front: bool = False
    dominated_by: list[str] = field(default_factory=list)
    ray_task: RayTask | None = None  # where and when a fanned-out sweep measured it


@dataclass
class RayTask:
    """The Ray task that quantised and measured a candidate (fanout.py)."""

    node: str
    devices: str  # the GPUs Ray gave it (CUDA_VISIBLE_DEVICES); "" on a CPU
    started_at: float  # seconds since the epoch, on the task's node
    ended_at: float


@dataclass
class Recommendation:
    candidate: str | None  # None: no candidate was promoted
    runner_up: str | None
    reason: str
    others: dict[str, str] = field(default_factory=dict)  # candidate -> why not it


@dataclass
class SweepRecord:
    model: str
    device: str
    policy: str
    objective: Objective
    quality: QualityMeasure
    quality_measure: str  # in words, with the confidence
    baseline: dict[str, float | None]  # the baseline's cost, throughput, weights, KV
    rows: list[SweepRow]
    front: list[str]
    recommendation: Recommendation
    sweep_dir: str
    created_at: str
    wall_time_s: float = 0.0
    plots: dict[str, str] = field(default_factory=dict)
    mlflow: MlflowSection = field(default_factory=lambda: MlflowSection())
    fanned_out: str | None = None  # the Ray cluster the candidates were measured on
    schema_version: int = SWEEP_SCHEMA_VERSION

    @property
    def exit_code(self) -> int:
        if any(r.status == "failed" for r in self.rows):
            return EXIT_INFRA
        return EXIT_PROMOTE if self.recommendation.candidate else EXIT_REJECT

    def to_dict(self) -> dict:
        return {**asdict(self), "exit_code": self.exit_code}


# ---- figures of one decided candidate, read from its record ---------------------------

def _gated_suites(rec: DecisionRecord) -> set[str]:
    out = set()
    for g in rec.gates:
        section, _, rest = g.gate.partition(":")
        if section in GATED_SECTIONS:
            out.add(rest.split("[")[0].split(":")[0])
    return out


def _level(load: dict, key: str | None) -> dict | None:
    levels = load.get("levels", [])
    if key is None:
        return levels[-1] if levels else None
    return next((lv for lv in levels if (lv.get("label") or f"c{lv['concurrency']}") == key),
                None)


def objective_value(rec: DecisionRecord, objective: Objective, role: str = "candidate"
                    ) -> float | None:
    cost = rec.cost.get(role, {})  # type: ignore[call-overload]
    room = rec.headroom.get(role, {})  # type: ignore[call-overload]
    if objective == "cost":
        return cost.get("usd_per_million_output_tokens")
    if objective == "throughput":
        if cost.get("level") is None:
            return None
        level = _level(rec.load.get(role, {}), cost["level"])  # type: ignore[call-overload]
        return level["output_throughput"] if level else None
    if objective == "weights":
        return room.get("weights_bytes")
    return room.get("kv_cache_tokens")


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a is not None and b else None


QUALITY_LABEL = {"worst_lower_bound": "worst lower bound of a gated suite's paired delta",
                 "top1_agreement": "top-1 agreement with the baseline on held-out text"}


def row_of(rec: DecisionRecord, objective: Objective, quality: QualityMeasure,
           evaluate_s: float | None, measured_now: bool) -> SweepRow:
    gated = _gated_suites(rec)
    deltas = {name: Delta(d["delta"], d["ci_low"], d["ci_high"])
              for name, pair in rec.suites.items() if name in gated
              for d in [pair.get("comparison", {}).get("(all)")] if d}
    fid = next(iter(rec.fidelity.values()), None)
    base_room, cand_room = rec.headroom.get("baseline", {}), rec.headroom.get("candidate", {})
    heaviest = [_level(rec.load.get(role, {}), None) for role in ("baseline", "candidate")]
    return SweepRow(
        candidate=rec.candidate, status="decided", decision=rec.decision,
        failing_gates=[g.gate for g in rec.gates if g.status == "fail"],
        inconclusive_gates=[g.gate for g in rec.gates if g.status == "inconclusive"],
        run_dir=rec.run_dir,
        format=(rec.quantization.get("served_format") or {}).get("label", ""),
        weights_bytes=cand_room.get("weights_bytes"),
        compression_ratio=_ratio(base_room.get("weights_bytes"), cand_room.get("weights_bytes")),
        kl_mean=fid["kl_mean"] if fid else None,
        top1_agreement=fid["top1_agreement"] if fid else None,
        deltas=deltas,
        throughput_ratio=_ratio(heaviest[1]["output_throughput"] if heaviest[1] else None,
                                heaviest[0]["output_throughput"] if heaviest[0] else None),
        slo_level=rec.cost.get("candidate", {}).get("level"),
        kv_capacity_ratio=_ratio(cand_room.get("kv_cache_tokens"),
                                 base_room.get("kv_cache_tokens")),
        usd_per_million_at_slo=rec.cost.get("candidate", {}).get(
            "usd_per_million_output_tokens"),
        build_s=rec.quantization.get("wall_time_s"),
        evaluate_s=evaluate_s, measured_now=measured_now,
        quality=_quality(quality, deltas, fid),
        efficiency=objective_value(rec, objective))


def _quality(measure: QualityMeasure, deltas: dict[str, Delta], fid: dict | None
             ) -> float | None:
    if measure == "top1_agreement":
        return fid["top1_agreement"] if fid else None
    return round(min(d.ci_low for d in deltas.values()), 6) if deltas else None


# ---- the front and the recommendation ---------------------------------------------------

def _better(a: float, b: float, objective: Objective) -> bool:
    return a > b if objective in HIGHER_IS_BETTER else a < b


def _dominates(a: SweepRow, b: SweepRow, objective: Objective) -> bool:
    assert a.quality is not None and a.efficiency is not None
    assert b.quality is not None and b.efficiency is not None
    no_worse = a.quality >= b.quality and not _better(b.efficiency, a.efficiency, objective)
    return no_worse and (a.quality > b.quality or _better(a.efficiency, b.efficiency, objective))


def _eligible(row: SweepRow) -> bool:
    """On the front only when it was judged, not rejected, and both figures exist."""
    return (row.status == "decided" and row.decision != "reject" and row.quality is not None
            and row.efficiency is not None)


def _show(value: float | None, objective: Objective) -> str:
    if value is None:
        return "none"
    return f"{value / 2**20:.0f} MiB" if objective == "weights" else f"{value:,.4g}"


def _why_not(row: SweepRow, best: SweepRow | None, objective: Objective) -> str:
    if row.status != "decided":
        return f"{row.status}: {row.reason}"
    if row.decision == "reject":
        return "rejected: " + ", ".join(row.failing_gates or ["no gate judged"])
    if row.decision == "inconclusive":
        return "inconclusive: " + ", ".join(row.inconclusive_gates)
    if row.quality is None:
        return "promoted, but has no quality figure for the policy's sweep.quality"
    if row.efficiency is None:
        return f"promoted, but has no {OBJECTIVE_LABEL[objective]} (no level met the SLO)"
    dominated = f"; dominated by {', '.join(row.dominated_by)}" if row.dominated_by else ""
    assert best is not None
    return (f"promoted, but {OBJECTIVE_LABEL[objective]} {_show(row.efficiency, objective)} "
            f"against {_show(best.efficiency, objective)} for {best.candidate}{dominated}")


def rank(rows: list[SweepRow], objective: Objective) -> tuple[list[str], Recommendation]:
    """Mark the front and the dominated (in place); recommend the best promoted candidate
    on the objective (ties: the better quality), with the runner-up and why the rest lost."""
    eligible = [r for r in rows if _eligible(r)]
    for r in rows:
        r.dominated_by = [o.candidate for o in eligible
                          if o is not r and _eligible(r) and _dominates(o, r, objective)]
        r.on_front = _eligible(r) and not r.dominated_by
    sign = -1 if objective in HIGHER_IS_BETTER else 1
    promoted = sorted((r for r in eligible if r.decision == "promote"),
                      key=lambda r: (sign * (r.efficiency or 0.0), -(r.quality or 0.0)))
    best = promoted[0] if promoted else None
    others = {r.candidate: _why_not(r, best, objective) for r in rows if r is not best}
    if best is None:
        reason = "no candidate was promoted: " + "; ".join(
            f"{name}: {why}" for name, why in others.items())
        return [r.candidate for r in rows if r.on_front], Recommendation(None, None, reason,
                                                                          others)
    reason = (f"{best.candidate}: promoted, the best {OBJECTIVE_LABEL[objective]} "
              f"({_show(best.efficiency, objective)}) among the promoted, quality retained "
              f"{best.quality:+.3f}")
    runner_up = promoted[1].candidate if len(promoted) > 1 else None
    return [r.candidate for r in rows if r.on_front], Recommendation(best.candidate, runner_up,
                                                                      reason, others)


# ---- running it -------------------------------------------------------------------------

@dataclass
class _Chosen:
    plans: list[Plan]
    skipped: list[SweepRow]


def generated_tokens(p: Plan) -> int:
    """Output tokens one model's evaluation generates at most: every generating suite's
    items at their max_tokens, and the load test's requests at every level and round."""
    tokens = sum(len(s.sample(p.cfg.profile, p.cfg.seed)) * s.spec.max_tokens
                 for s in p.suites if s.spec.scoring not in ("choice", "logprobs", "lm-eval"))
    return tokens + sum(r.output_tokens for r in p.requests) * len(p.cfg.workload.levels) \
        * p.cfg.load.rounds


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
        p = plan(cfg, name, outputs, device, cluster and (cluster.per_node, cluster.total,
                                                          cluster.where))
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
    from .pipeline import new_run_dir, tracker_for
    from .serve import detect_device

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
    objective = chosen.plans[0].policy.sweep.objective
    quality = chosen.plans[0].policy.sweep.quality
    sweep_dir = new_run_dir(runs_root, "sweep")
    console.print(f"sweep folder {sweep_dir}: {len(chosen.plans)} candidates "
                  f"({', '.join(p.candidate_name for p in chosen.plans)}), objective "
                  f"{objective}")
    started = time.perf_counter()
    rows: list[SweepRow] = []
    tags = {"kind": "sweep", "device": device,
            "candidates": ",".join(p.candidate_name for p in chosen.plans)}
    with tracker_for(cfg, "sweep", tags, console) as tracker:
        if cluster is None:
            for i, p in enumerate(chosen.plans, 1):
                console.rule(f"candidate {i} of {len(chosen.plans)}: {p.candidate_name}")
                rows.append(_evaluate_one(p, inside(sweep_dir, p.candidate_name), console,
                                          remeasure, tracker, objective, quality))
        else:
            rows += fan_out(chosen.plans, cluster, remeasure, console, lambda p, m, task: (
                replace(_evaluate_one(p, inside(sweep_dir, p.candidate_name), console,
                                      remeasure, tracker, objective, quality, m),
                        ray_task=RayTask(**task))))
        rows += chosen.skipped
        front, recommendation = rank(rows, objective)
        record = SweepRecord(
            model=cfg.model.name, device=device, policy=str(cfg.resolve(cfg.gates)),
            objective=objective, quality=quality,
            quality_measure=f"{QUALITY_LABEL[quality]} (policy sweep.quality: {quality}, "
                            f"confidence {chosen.plans[0].policy.confidence})",
            baseline=_baseline_figures(rows, objective), rows=rows, front=front,
            recommendation=recommendation, sweep_dir=str(sweep_dir),
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            wall_time_s=round(time.perf_counter() - started, 1),
            mlflow={"tracking_uri": tracker.uri, "run_id": tracker.run_id,
                    "experiment_id": tracker.experiment_id, "ui": tracker.ui_link()},
            fanned_out=cluster.where if cluster else None)
        write_sweep(sweep_dir, record)
        _log_sweep(tracker, record, sweep_dir)
    record.mlflow.update(tracker.status())  # type: ignore[typeddict-item]
    write_sweep(sweep_dir, record)
    print_sweep(record, console)
    return record


def _join(cfg: RunConfig, names: list[str], outputs: Outputs, address: str) -> Cluster:
    """The Ray cluster a fanned-out sweep runs on, joined after the checks that need no
    device (a bad config is exit 2 before Ray is touched)."""
    if cfg.endpoints.baseline is not None or cfg.endpoints.candidate is not None:
        raise InputError(f"{cfg.source}: endpoints: a sweep fanned out on Ray measures what "
                         "it serves itself (an endpoint's key would travel in Ray's task "
                         "environment); run it without --ray-address")
    check_candidates(cfg, names, outputs, serving=False)
    return connect(address)


def _evaluate_one(p: Plan, run_dir: Path, console: Console, remeasure: bool,
                  parent: Tracker, objective: Objective, quality: QualityMeasure,
                  measured_in: Callable[[Path], Any] | None = None) -> SweepRow:
    """measured_in: what a Ray task measured, handed over into run_dir (fanout.py);
    None: measured here."""
    from .pipeline import evaluate_planned  # the same stages as evaluate, not a copy

    run_dir.mkdir()
    started = time.perf_counter()
    handed = functools.partial(measured_in, run_dir) if measured_in is not None else None
    try:
        rec = evaluate_planned(p, run_dir, console, remeasure, parent=parent, measured=handed)
    except InputError as err:  # found only after building (a recipe_file's format)
        return SweepRow(p.candidate_name, "skipped", str(err), run_dir=str(run_dir))
    except InfraError as err:
        console.print(f"[red]✗[/] {escape(p.candidate_name)}: {escape(str(err))}; the sweep "
                      "goes on with the next candidate")
        return SweepRow(p.candidate_name, "failed", str(err), run_dir=str(run_dir))
    return row_of(rec, objective, quality, round(time.perf_counter() - started, 1),
                  not rec.reused.get("measurement_pair", False))


def _baseline_figures(rows: list[SweepRow], objective: Objective) -> dict[str, float | None]:
    from .regate import load_record

    decided = next((r for r in rows if r.status == "decided"), None)
    if decided is None:
        return {}
    rec = load_record(Path(decided.run_dir))
    return {name: objective_value(rec, name, "baseline")  # type: ignore[arg-type]
            for name in OBJECTIVE_LABEL}


# ---- writing it -------------------------------------------------------------------------

def write_sweep(sweep_dir: Path, record: SweepRecord) -> None:
    from .plots import plot_pareto

    path = plot_pareto(record, sweep_dir / PARETO_PLOT)
    if path is not None:
        record.plots = {"quality retained vs " + record.objective: path.name}
    write_json(sweep_dir / "sweep.json", record.to_dict())
    (sweep_dir / "sweep.md").write_text(render_sweep(record))


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def render_sweep(record: SweepRecord) -> str:
    rec = record.recommendation
    head = (f"**Recommended: `{rec.candidate}`**" + (f" (runner-up `{rec.runner_up}`)"
                                                    if rec.runner_up else "")
            if rec.candidate else "**No candidate recommended**")
    lines = [f"# Sweep of `{record.model}` on {record.device}", "", head, "", rec.reason, "",
             f"Objective: {OBJECTIVE_LABEL[record.objective]}; quality retained: "
             f"{record.quality_measure}. Policy `{record.policy}`. Wall time "
             f"{record.wall_time_s:.0f} s. Exit code {record.exit_code}.", "",
             "| candidate | decision | failing gates | format | weights MiB (×) | KL / top-1 | "
             "gated deltas [interval] | throughput × | SLO level | KV × | $/M tok at SLO | "
             "built s | evaluated s | front |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in record.rows:
        if r.status != "decided":
            lines.append(f"| {r.candidate} | {r.status} | {r.reason} | | | | | | | | | | | |")
            continue
        deltas = "<br>".join(f"{n} {d.delta:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}]"
                             for n, d in r.deltas.items()) or "–"
        front = "yes" if r.on_front else (f"dominated by {', '.join(r.dominated_by)}"
                                          if r.dominated_by else "no")
        weights = (f"{r.weights_bytes / 2**20:.0f} ({_fmt(r.compression_ratio, '.2f')})"
                   if r.weights_bytes else "–")
        lines.append(
            f"| {r.candidate} | {r.decision} | {', '.join(r.failing_gates) or '–'} | "
            f"{r.format} | {weights} | {_fmt(r.kl_mean, '.4f')} / "
            f"{_fmt(r.top1_agreement, '.3f')} | {deltas} | {_fmt(r.throughput_ratio, '.2f')} | "
            f"{r.slo_level or 'none'} | {_fmt(r.kv_capacity_ratio, '.2f')} | "
            f"{_fmt(r.usd_per_million_at_slo, '.2f')} | {_fmt(r.build_s, '.0f')} | "
            f"{_fmt(r.evaluate_s, '.0f')}{'' if r.measured_now else ' (cached)'} | {front} |")
    base = record.baseline
    if base:
        lines += ["", f"Baseline: {_fmt(base.get('cost'), '.2f')} $/M output tokens at the SLO, "
                  f"{_fmt(base.get('throughput'), '.1f')} output tokens/s there, weights "
                  f"{_fmt((base.get('weights') or 0) / 2**20, '.0f')} MiB, KV cache "
                  f"{_fmt(base.get('kv_capacity'), ',.0f')} tokens."]
    lines += ["", "Why not the others:", ""]
    lines += [f"- `{name}`: {why}" for name, why in rec.others.items()]
    lines += ["", *[f"![{name}]({path})" for name, path in record.plots.items()]]
    return "\n".join(lines) + "\n"


def print_sweep(record: SweepRecord, console: Console) -> None:
    table = Table(title=f"sweep of {record.model}: objective {record.objective}")
    for col in ("candidate", "decision", "quality", record.objective, "front", "failing gates"):
        table.add_column(col, overflow="fold")
    for r in record.rows:
        table.add_row(escape(r.candidate), r.decision or r.status,
                      _fmt(r.quality, "+.3f"), _show(r.efficiency, record.objective)
                      if r.status == "decided" else "–",
                      "yes" if r.on_front else "", escape(", ".join(r.failing_gates)
                                                          or r.reason))
    console.print(table)
    rec = record.recommendation
    verdict = f"recommended: {rec.candidate}" if rec.candidate else "none recommended"
    console.print(f"[bold]{escape(verdict)}[/] — {escape(rec.reason)}")
    console.print(f"sweep record: {Path(record.sweep_dir) / 'sweep.json'} · MLflow UI: "
                  f"{record.mlflow.get('ui', '')}")


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
    tracker.set_tags({"recommended": record.recommendation.candidate or "none",
                      "objective": record.objective, "front": ",".join(record.front)})
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
