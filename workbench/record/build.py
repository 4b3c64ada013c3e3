"""The decision record assembled from the stages' results: the plan, the measured pair and
the gate report. Nothing is computed here that a stage computes: the suite tables are the
gate stage's comparisons, the load and headroom are the measurements' own.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from workbench.config.run_config import DEFAULT_PRICE_PER_HOUR, EndpointConfig
from workbench.gate.verdict import GateReport, SuiteComparison
from workbench.loadtest.results import LoadResult, cost_figures
from workbench.measure.measurement import SAMPLING, Measurement
from workbench.measure.pair import ROLES, MeasuredPair, Role
from workbench.measure.watch import StoppedEarly
from workbench.plan.plan import Plan
from workbench.quantize.checks import gpu_capability
from workbench.quantize.formats import DenseServing, runs_as
from workbench.quantize.kernels import layer_shapes
from workbench.quantize.zen_rules import ZenInt4
from workbench.record.decision import DecisionRecord, Sampling, host_facts
from workbench.record.plots import (
    LATENCY_PLOT,
    TELEMETRY_PLOT,
    plot_latency_vs_throughput,
    plot_telemetry,
)
from workbench.record.rollout import rollout_section
from workbench.record.sections import (
    BatchingJson,
    CostSection,
    EarlyStopJson,
    EndpointSection,
    EngineSection,
    MlflowSection,
    ServedDenseJson,
    SuitePair,
    SuiteSummary,
)
from workbench.serve.engine import ServerInfo
from workbench.serve.engine_log import served_on_zen
from workbench.suites.results import SuiteResult
from workbench.suites.scorers.generation_health import health_summary

__all__ = ["build_record", "endpoint_section", "suite_pairs", "suite_summary"]


def suite_summary(r: SuiteResult) -> SuiteSummary:
    out = SuiteSummary(n=r.n, kind=r.kind, accuracy=r.accuracy,
                       slices=r.slices, metrics=r.metrics,  # type: ignore[typeddict-item]
                       digest=r.digest)
    if r.generates:
        out["health"] = health_summary(r.items)  # type: ignore[arg-type,typeddict-item]
    return out


def suite_pairs(base: dict[str, SuiteResult], cand: dict[str, SuiteResult],
                compared: dict[str, SuiteComparison]) -> dict[str, SuitePair]:
    """Each suite both sides ran: its two summaries (as the gates read them: GateReport's
    sides) and the gate stage's comparison."""
    out: dict[str, SuitePair] = {}
    for name, b in base.items():
        if name not in cand:
            continue
        pair = SuitePair(baseline=suite_summary(b), candidate=suite_summary(cand[name]))
        if name in compared:
            c = compared[name]
            pair["flips"], pair["comparison"] = c.flips, c.score
            if c.health is not None:
                pair["health_comparison"] = c.health
        out[name] = pair
    return out


def _cost(p: Plan, role: str, load: LoadResult, profile: str | None = None) -> CostSection:
    """Cost at the highest load level that met the SLO (the highest level, when the
    workload declares no SLO), for every device the engine holds (load.price_per_hour is
    per device); profile: a further load profile's name (default the run's own)."""
    work = p.cfg.load.profiles[profile] if profile else p.cfg.workload
    per_device = work.price_per_hour or DEFAULT_PRICE_PER_HOUR[p.device]
    devices = p.devices(role)
    heaviest = load.levels[-1] if load.levels else None
    level = load.max_stable_level() if work.slo is not None else heaviest
    source = "config" if work.price_per_hour else f"illustrative default for {p.device}"
    cost: CostSection = {
        **cost_figures(level, per_device * devices), "devices": devices,  # type: ignore[typeddict-item]
        "price_per_device_hour": per_device,
        "price_source": f"{source}, x {devices} devices" if devices > 1 else source}
    cap = load.capacity
    if cap.get("held") is not None and cap.get("output_throughput"):
        cost["at_capacity"] = {
            "knob": cap["knob"], "held": float(cap["held"] or 0),
            "usd_per_million_output_tokens": round(
                per_device * devices / 3600 / float(cap["output_throughput"] or 1) * 1e6, 4)}
    return cost


def _sampling(p: Plan) -> Sampling:
    """How every suite was decoded: the settings a rerun must repeat."""
    return {**SAMPLING, "seed": p.cfg.seed, "profile": p.cfg.profile,  # type: ignore[typeddict-item]
            "max_tokens": {s.name: s.spec.max_tokens for s in p.suites
                           if s.generates},
            "guided_decoding": "response_format json_schema (xgrammar, no free whitespace)",
            "split": p.split.to_json() if p.split else None}


def _plots(p: Plan, pair: MeasuredPair, run_dir: Path) -> dict[str, str]:
    title = (f"{p.cfg.model.name}: baseline vs {p.candidate_name}, load profile "
             f"{p.cfg.load.profile!r} on {p.device}")
    loads: dict[str, LoadResult] = {role: pair.side(role).load for role in ROLES}
    plots = {"latency vs throughput":
             plot_latency_vs_throughput(loads, title, run_dir / LATENCY_PLOT).name}
    telemetry = plot_telemetry(loads, f"{title}: the engine during each level",
                               run_dir / TELEMETRY_PLOT)
    if telemetry is not None:
        plots["engine telemetry"] = telemetry.name
    return plots


def _served_dtype(p: Plan, cand: Measurement) -> str | None:
    """The dtype the candidate's int4 kernel saw; None where its weights were served dense
    (no int4 kernel ran at all)."""
    return None if p.dense is not None else cand.server.device_facts.get("serve_dtype")


def _zen_grid(p: Plan, cand: Measurement) -> ZenInt4 | None:
    """The candidate's int4 grid where its engine served on AMD Zen's platform (its log
    said so: serve/engine_log.py), for what each layer ran as; None elsewhere, or for a
    recipe file or checkpoint, whose grid the config does not state."""
    c = p.candidate
    symmetric, group = c.resolved_symmetric, c.resolved_group_size
    if not served_on_zen(cand.server.kernels) or symmetric is None or group is None:
        return None
    shapes = layer_shapes(json.loads((p.model_dir / "config.json").read_text()),
                          p.cfg.engine.tensor_parallel_size)
    return ZenInt4(symmetric, group, tuple(s.partition[0] for s in shapes.values()))


def _engine(p: Plan, base: Measurement, cand: Measurement) -> EngineSection:
    sides = (("baseline", base), ("candidate", cand))
    return {"version": p.engine_version, "config": p.cfg.engine.model_dump(),
            "baseline_command": base.server.command, "candidate_command": cand.server.command,
            "baseline_cache": base.server.cache_info, "candidate_cache": cand.server.cache_info,
            "kernels": {role: m.server.kernels for role, m in sides},
            "cold_start": {role: {"healthy_s": m.server.cold_start_s,
                                  "first_token_s": m.server.first_token_s}
                           for role, m in sides if not m.server.endpoint},
            "batching": {role: batching for role, m in sides
                         if (batching := _batching(m.server)) is not None}}


def _early_stop(stopped: StoppedEarly | None) -> EarlyStopJson | None:
    if stopped is None:
        return None
    return EarlyStopJson(after=stopped.after, gates=list(stopped.gates),
                         evidence=list(stopped.evidence), level=stopped.level,
                         not_measured=list(stopped.not_measured),
                         load_not_measured=stopped.load_not_measured)


def _served_dense(dense: DenseServing | None,
                  judged_here: Literal["promote", "reject", "inconclusive"] | None
                  ) -> ServedDenseJson | None:
    if dense is None:
        return None
    assert judged_here is not None  # judged with dense.not_own (pipeline/evaluate.py)
    return ServedDenseJson(candidate=dense.candidate, format=dense.format, why=dense.why,
                           checkpoint=dense.checkpoint, not_judged=dense.not_own,
                           judged_here=judged_here)


def _batching(server: ServerInfo) -> BatchingJson | None:
    """The batch the engine ran with; None at an endpoint and for a measurement made
    before the batch limits were recorded."""
    facts, flags = server.device_facts, server.scheduler
    if server.endpoint or not facts.get("max_num_seqs"):
        return None
    return {"max_num_seqs": facts["max_num_seqs"],
            "max_num_batched_tokens": facts["max_num_batched_tokens"],
            "chunked_prefill": flags.get("chunked_prefill"),
            "prefix_caching": flags.get("prefix_caching")}


def endpoint_section(ep: EndpointConfig | None, server: ServerInfo) -> EndpointSection:
    """What the record keeps of an endpoint: where, what it served, how it was asked
    (the key's variable, never the key) and what could not be measured there."""
    env = ep.api_key_env if ep else None
    return {"url": server.endpoint, "model": server.served_name, "version": server.version,
            "auth": f"bearer token from ${env}" if env else "none",
            "devices": ep.devices if ep else 1, "unmeasured": list(server.unmeasured)}


def build_record(p: Plan, pair: MeasuredPair, report: GateReport, fidelity: dict[str, dict],
                 run_dir: Path, mlflow: MlflowSection) -> DecisionRecord:
    q, base, cand = pair.artifact, pair.baseline, pair.candidate
    sides: tuple[tuple[Role, Measurement], ...] = (("baseline", base), ("candidate", cand))
    rec = DecisionRecord(
        decision=report.decision,
        policy=report.policy,
        candidate=p.candidate_name,
        model={"name": p.cfg.model.name, "path": str(p.model_dir),
               "digest": p.model_digest, "candidate_path": q.path,
               **({"hub": p.hub} if p.hub else {})},  # type: ignore[typeddict-item]
        device=host_facts(p.device, cand.server.device_facts,  # type: ignore[arg-type]
                          not cand.server.endpoint),
        gates=report.gates,
        comparability=report.comparability,
        suites=suite_pairs(*report.sides, report.suites),
        fidelity=fidelity,
        load={role: m.load.to_dict() for role, m in sides},
        headroom={role: m.headroom for role, m in sides if m.headroom},
        cost={role: _cost(p, role, m.load) for role, m in sides},
        engine=_engine(p, base, cand),
        quantization={**q.manifest, "serve_args": q.serve_args,
                      **({"recipe_values": values}  # type: ignore[typeddict-item]
                         if (values := p.candidate.weight_values()) else {}),
                      **({"served_format": q.format.to_dict(),
                          "runs_as": runs_as(q.format, p.device, gpu_capability(p.device),
                                             _served_dtype(p, cand), _zen_grid(p, cand))}
                         if q.path else {})},
        endpoints={role: endpoint_section(p.cfg.endpoints.of(role), m.server)
                   for role, m in sides if m.server.endpoint},
        data_digests={s.name: s.digest for s in p.suites},
        seeds={"run": p.cfg.seed, "load": p.cfg.workload.seed,
               "calibration": p.cfg.calibration.seed},
        sampling=_sampling(p),
        library_versions={"engine": p.engine_version,
                          **q.manifest.get("library_versions", {})},
        run_dir=str(run_dir),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        reused={"quantized_artifact": q.cache_hit, **pair.reused},
        plots=_plots(p, pair, run_dir),
        mlflow=mlflow,
        served_dense=_served_dense(q.dense, report.judged_here),
    )
    rec.further_load = {name: {"load": {role: m.further_load[name].to_dict()
                                        for role, m in sides if name in m.further_load},
                               "cost": {role: _cost(p, role, m.further_load[name], name)
                                        for role, m in sides if name in m.further_load}}
                        for name in p.cfg.load.also}
    rec.early_stop = _early_stop(cand.stopped)
    rec.rollout = rollout_section(rec, p.cfg.rollout)
    return rec
