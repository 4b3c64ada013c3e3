"""A sweep as a table: a row per candidate read from its decision record, the Pareto front of
quality retained against the objective (a rejected candidate never on it), and the
recommendation with the reason each other candidate lost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from workbench.config.gate_policy import Objective, QualityMeasure
from workbench.mechanisms.errors import (
    EXIT_INFRA,
    EXIT_PROMOTE,
    EXIT_REJECT,
)
from workbench.record.decision import DecisionRecord, counted
from workbench.record.sections import MlflowSection

__all__ = ["DENSE_CAVEAT", "GATED_SECTIONS", "HIGHER_IS_BETTER", "OBJECTIVE_LABEL",
           "QUALITY_LABEL", "SWEEP_SCHEMA_VERSION", "Delta", "RayTask", "Recommendation",
           "SweepRecord", "SweepRow", "decision_text", "failing_text", "objective_value",
           "rank", "recipe_words", "row_of", "show_objective"]

# 7: a candidate served dense (served_dense, judged_here: its decision on what this device
# can judge; its weights from its artifact), a recipe's values in words (recipe);
# 6: a candidate stopped early (stopped_by, not_measured)
SWEEP_SCHEMA_VERSION = 7
# 5: a registry entry names the champion before it; 4: how many looks each candidate's
# decision took; 3: the gates the baseline itself misses; 2: rows say which Ray task
# measured them


HIGHER_IS_BETTER = {"throughput", "kv_capacity"}
DENSE_CAVEAT = ("; served dense here (no kernel for its format on this device): promoted on "
                "its quality alone, its speed and memory still to be judged where the format "
                "has a kernel")


OBJECTIVE_LABEL = {"cost": "$ per million output tokens at the SLO",
                   "throughput": "output tokens/s at the SLO",
                   "weights": "weights on disk (MiB)", "kv_capacity": "KV-cache tokens"}


GATED_SECTIONS = ("quality", "safety", "structured", "traffic")


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
    # stopped early (gate/early.py): the gates that failed past doubt, and the suite runs
    # (and "load test") left out; empty for a candidate measured in full
    stopped_by: list[str] = field(default_factory=list)
    not_measured: list[str] = field(default_factory=list)
    inconclusive_gates: list[str] = field(default_factory=list)
    # inconclusive gate -> about how many more items would decide it (its evidence says)
    items_to_decide: dict[str, int] = field(default_factory=dict)
    # absolute gates the baseline itself misses (record policy.baseline_misses)
    baseline_misses: list[str] = field(default_factory=list)
    looks: int = 1  # 2: decided on every item after the smoke sample left it open
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
    # 7: its weights served dequantised, this device having no kernel for its format: its
    # decision on the gates this device can judge (speed and memory left out), which is
    # what tune searches on; None for a candidate served as built
    served_dense: bool = False
    judged_here: Literal["promote", "reject", "inconclusive"] | None = None
    # an integer weight-only recipe's values in a few words (gptq sym g64): the table's and
    # the plot's label; "" for other candidates
    recipe: str = ""

    @property
    def decision_here(self) -> str | None:
        """The decision on what this device can judge: the decision itself, or for a
        candidate served dense its decision with speed and memory left out."""
        return self.judged_here if self.served_dense else self.decision


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
    # gates no candidate can pass because the baseline misses them: the policy, not the
    # candidates, decided those (said before the candidates are listed)
    baseline_misses: list[str] = field(default_factory=list)
    schema_version: int = SWEEP_SCHEMA_VERSION

    @property
    def exit_code(self) -> int:
        if any(r.status == "failed" for r in self.rows):
            return EXIT_INFRA
        return EXIT_PROMOTE if self.recommendation.candidate else EXIT_REJECT

    def to_dict(self) -> dict:
        return {**asdict(self), "exit_code": self.exit_code}


def _gated_suites(rec: DecisionRecord) -> set[str]:
    """The suites whose score a gate judges (a gate on another per-item metric, such as
    schema_valid, does not make the suite's score part of the quality retained)."""
    return {g.identity.subject for g in rec.gates
            if g.identity.section in GATED_SECTIONS and g.identity.metric is None}


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
        return room.get("weights_bytes") or _artifact_bytes(rec)
    return room.get("kv_cache_tokens")


def recipe_words(rec: DecisionRecord) -> str:
    """An integer weight-only recipe's values in a few words: `awq asym g32, 16-bit:
    re:.*down_proj` ("" for other candidates and for records before recipe values)."""
    v = rec.quantization.get("recipe_values")
    if not v:
        return ""
    words = f"{v['method']} {'sym' if v['symmetric'] else 'asym'} g{v['group_size']}"
    if v.get("actorder") not in (None, "static"):
        words += f" actorder {v['actorder']}"
    return words + "".join(f", {o['bits']}-bit: {' '.join(o['targets'])}"
                           for o in v.get("overrides", []))


def _artifact_bytes(rec: DecisionRecord) -> int | None:
    """A candidate served dense has no headroom of its own (its served weights are the
    dense ones): its artifact's size on disk is its weights."""
    return rec.quantization.get("size_bytes") if rec.served_dense else None


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
    cost: dict[str, Any] = dict(rec.cost.get("candidate") or {})
    return SweepRow(
        candidate=rec.candidate, status="decided", decision=rec.decision,
        failing_gates=[g.gate for g in counted(rec.gates) if g.status == "fail"],
        stopped_by=list(rec.early_stop["gates"]) if rec.early_stop else [],
        not_measured=_not_measured(rec),
        inconclusive_gates=[g.gate for g in counted(rec.gates) if g.status == "inconclusive"],
        items_to_decide={g.gate: int(g.evidence["items_to_decide"]) for g in counted(rec.gates)
                         if g.status == "inconclusive"
                         and isinstance(g.evidence.get("items_to_decide"), int)},
        baseline_misses=list(rec.policy.get("baseline_misses") or []),
        looks=(rec.policy.get("looks") or {}).get("taken", 1),
        run_dir=rec.run_dir,
        format=(rec.quantization.get("served_format") or {}).get("label", "")
        + (" (served dense)" if rec.served_dense else ""),
        weights_bytes=cand_room.get("weights_bytes") or _artifact_bytes(rec),
        # served dense: the artifact's own ratio (its folder against the baseline's)
        compression_ratio=rec.quantization.get("compression_ratio") if rec.served_dense
        else _ratio(base_room.get("weights_bytes"), cand_room.get("weights_bytes")),
        kl_mean=fid["kl_mean"] if fid else None,
        top1_agreement=fid["top1_agreement"] if fid else None,
        deltas=deltas,
        throughput_ratio=_ratio(heaviest[1]["output_throughput"] if heaviest[1] else None,
                                heaviest[0]["output_throughput"] if heaviest[0] else None),
        slo_level=cost.get("level"),
        kv_capacity_ratio=_ratio(cand_room.get("kv_cache_tokens"),
                                 base_room.get("kv_cache_tokens")),
        usd_per_million_at_slo=cost.get("usd_per_million_output_tokens"),
        build_s=rec.quantization.get("wall_time_s"),
        evaluate_s=evaluate_s, measured_now=measured_now,
        quality=_quality(quality, deltas, fid),
        efficiency=objective_value(rec, objective),
        served_dense=rec.served_dense is not None, recipe=recipe_words(rec),
        judged_here=rec.served_dense["judged_here"] if rec.served_dense else None)


def _not_measured(rec: DecisionRecord) -> list[str]:
    stop = rec.early_stop
    if stop is None:
        return []
    return [*stop["not_measured"], *(["load test"] if stop["load_not_measured"] else [])]


def decision_text(row: SweepRow) -> str:
    """The table's decision: a candidate served dense adds its decision on what this
    device can judge."""
    if not row.served_dense:
        return row.decision or row.status
    return f"{row.decision} ({row.judged_here} on quality alone: served dense)"


def failing_text(row: SweepRow) -> str:
    """The gates a row failed, and which of them stopped it early (the table's column)."""
    text = ", ".join(row.failing_gates) or "–"
    if row.stopped_by:
        text += f" (stopped early by {', '.join(row.stopped_by)}; not measured: " \
                f"{', '.join(row.not_measured) or 'nothing'})"
    return text


def _quality(measure: QualityMeasure, deltas: dict[str, Delta], fid: dict | None
             ) -> float | None:
    if measure == "top1_agreement":
        return fid["top1_agreement"] if fid else None
    return round(min(d.ci_low for d in deltas.values()), 6) if deltas else None


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


def show_objective(value: float | None, objective: Objective) -> str:
    if value is None:
        return "none"
    return f"{value / 2**20:.0f} MiB" if objective == "weights" else f"{value:,.4g}"


def _why_not(row: SweepRow, best: SweepRow | None, objective: Objective) -> str:
    if row.status != "decided":
        return f"{row.status}: {row.reason}"
    if row.decision_here == "reject":
        return "rejected: " + ", ".join(row.failing_gates or ["no gate judged"])
    if row.decision_here == "inconclusive":
        return "inconclusive: " + ", ".join(
            g + (f" (about {row.items_to_decide[g]} more items)" if g in row.items_to_decide
                 else "") for g in row.inconclusive_gates)
    if row.quality is None:
        return "promoted, but has no quality figure for the policy's sweep.quality"
    if row.efficiency is None:
        return f"promoted, but has no {OBJECTIVE_LABEL[objective]} (no level met the SLO)"
    dominated = f"; dominated by {', '.join(row.dominated_by)}" if row.dominated_by else ""
    assert best is not None
    return (f"promoted, but {OBJECTIVE_LABEL[objective]} "
            f"{show_objective(row.efficiency, objective)} against "
            f"{show_objective(best.efficiency, objective)} for {best.candidate}{dominated}")


def rank(rows: list[SweepRow], objective: Objective) -> tuple[list[str], Recommendation]:
    """Mark the front and the dominated (in place); recommend the best promoted candidate
    on the objective (ties: the better quality), with the runner-up and why the rest lost."""
    eligible = [r for r in rows if _eligible(r)]
    for r in rows:
        r.dominated_by = [o.candidate for o in eligible
                          if o is not r and _eligible(r) and _dominates(o, r, objective)]
        r.on_front = _eligible(r) and not r.dominated_by
    sign = -1 if objective in HIGHER_IS_BETTER else 1
    # a candidate served dense counts as promoted on what this device can judge (its
    # speed and memory judged nowhere here: its row and this reason say so)
    promoted = sorted((r for r in eligible if r.decision_here == "promote"),
                      key=lambda r: (sign * (r.efficiency or 0.0), -(r.quality or 0.0)))
    best = promoted[0] if promoted else None
    others = {r.candidate: _why_not(r, best, objective) for r in rows if r is not best}
    if best is None:
        reason = "no candidate was promoted: " + "; ".join(
            f"{name}: {why}" for name, why in others.items())
        return [r.candidate for r in rows if r.on_front], Recommendation(None, None, reason,
                                                                          others)
    reason = (f"{best.candidate}: promoted, the best {OBJECTIVE_LABEL[objective]} "
              f"({show_objective(best.efficiency, objective)}) among the promoted, quality "
              "retained "
              f"{best.quality:+.3f}" + (DENSE_CAVEAT if best.served_dense else ""))
    runner_up = promoted[1].candidate if len(promoted) > 1 else None
    return [r.candidate for r in rows if r.on_front], Recommendation(best.candidate, runner_up,
                                                                      reason, others)
