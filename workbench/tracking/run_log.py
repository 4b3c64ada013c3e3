"""What one evaluation sends to MLflow, and how its run reads in the runs table: named by
candidate and decision (`int4 · reject · 7 gates failed`), the decision and gate counts as
tags and metrics a user can add as columns, decision.md as the run's description.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from workbench.config.run_config import RunConfig, tracking_uri
from workbench.measure.measurement import Measurement
from workbench.plan.checks import unreachable
from workbench.plan.plan import Plan
from workbench.record.decision import DecisionRecord, counted, gate_counts, record_metrics
from workbench.record.render import render_markdown
from workbench.record.sections import MlflowSection
from workbench.serve.device import DeviceFacts, device_facts
from workbench.tracking.tracker import Tracker

__all__ = ["DESCRIPTION_LIMIT", "DESCRIPTION_TAG", "RUN_NAME_TAG", "TRUNCATED", "description",
           "device_params", "log_run", "mlflow_section", "run_name", "run_params", "tracker_for",
           "tracking_line"]

# MLflow's own tags for a run's name and its description (shown above the run's page)
RUN_NAME_TAG = "mlflow.runName"
DESCRIPTION_TAG = "mlflow.note.content"
DESCRIPTION_LIMIT = 8000
TRUNCATED = "\n\n… (cut to fit MLflow's limit; the whole record: decision.md in the artifacts)"


def tracker_for(cfg: RunConfig, label: str, tags: dict[str, str], console: Console,
                parent: Tracker | None = None) -> Tracker:
    """A run's MLflow tracker (named `label · running` until it ends); without MLflow when
    the config allows a server that does not answer (the plan refused it otherwise), or
    when the parent's server was lost."""
    if parent is None:
        enabled = cfg.tracking.required or unreachable(tracking_uri(cfg.tracking)) is None
        if not enabled:
            console.print(f"[yellow]![/] tracking server {tracking_uri(cfg.tracking)} does "
                          "not answer; running without MLflow (tracking.required: false)")
    else:
        enabled = parent.lost is None
    return Tracker(cfg.tracking, f"{label} · running", {"model": cfg.model.name, **tags},
                   on_lost=lambda why: console.print(
                       f"[yellow]![/] MLflow lost ({escape(why)}): the run goes on and is "
                       "recorded locally; what was not logged is listed in decision.json"),
                   enabled=enabled, parent=parent)


def run_params(p: Plan, run_dir: Path) -> dict[str, object]:
    cfg = p.cfg
    return {"candidate": p.candidate_name, "recipe": p.candidate.model_dump_json(),
            "model_path": str(p.model_dir), "device": p.device, "engine": p.engine_version,
            "engine_config": cfg.engine.model_dump_json(), "suites": ",".join(cfg.suites),
            "profile": cfg.profile, "load_profile": ",".join(cfg.load.gated),
            "load": cfg.workload.model_dump_json(), "gates": str(cfg.resolve(cfg.gates)),
            **{f"load.{name}": w.model_dump_json() for name, w in cfg.load.further.items()},
            "run_dir": str(run_dir), **device_params(device_facts(p.device, cfg.engine)),
            **({"suite_binding": p.suite_binding} if p.device == "cpu" else {}),
            **({"served": f"dense ({p.dense.format} dequantised: no kernel here)"}
               if p.dense else {})}


def device_params(facts: DeviceFacts) -> dict[str, object]:
    """The GPU a run measured on, as columns the runs table can show and filter on (an
    A100's run beside an H100's); on a CPU only the suites' batch and kernels."""
    out: dict[str, object] = {"suite_in_flight": facts.suite_in_flight,
                              "batch_invariant": facts.batch_invariant,
                              "serve_dtype": facts.serve_dtype}
    if facts.gpus:
        gpus = facts.gpus["gpus"]
        out |= {"gpu": f"{len(gpus)} x {', '.join(sorted({g['name'] for g in gpus}))}",
                "gpu_compute_capability": ",".join(sorted({g["compute_capability"]
                                                           for g in gpus})),
                "gpu_mig_profile": ",".join(sorted({g.get("mig_profile") or "none"
                                                    for g in gpus})),
                "gpu_driver": facts.gpus.get("driver_version", ""),
                "cuda": facts.gpus.get("cuda_driver_version", "")}
    return out


def run_name(rec: DecisionRecord) -> str:
    """What the runs table shows: the candidate, the decision and what decided it."""
    gates = counted(rec.gates)
    failed = sum(g.status == "fail" for g in gates)
    open_ = sum(g.status == "inconclusive" for g in gates)
    passed = sum(g.status == "pass" for g in gates)
    if failed:
        why = f"{failed} gate{'s' * (failed > 1)} failed"
        why += ", stopped early" if rec.early_stop else ""
    elif open_:
        why = f"{open_} gate{'s' * (open_ > 1)} inconclusive"
    else:
        why = f"{passed} gates passed"
    return f"{rec.candidate} · {rec.decision} · {why}"


def description(rec: DecisionRecord) -> str:
    """decision.md for the run's page, within what MLflow keeps of a tag value (8,000
    characters); the whole record is among the run's artifacts."""
    text = render_markdown(rec)
    if len(text) <= DESCRIPTION_LIMIT:
        return text
    cut = text[:DESCRIPTION_LIMIT - len(TRUNCATED)].rsplit("\n", 1)[0]
    return cut + TRUNCATED


def stopped_tags(rec: DecisionRecord) -> dict[str, str]:
    """A run whose candidate was stopped early says so in tags a user can filter the runs
    table by (stopped_early = "true"), with the suite after which and the gates that
    stopped it; a run measured in full says "false"."""
    stop = rec.early_stop
    if stop is None:
        return {"stopped_early": "false"}
    return {"stopped_early": "true", "stopped_early.after": stop["after"],
            "stopped_early.gates": ", ".join(stop["gates"]),
            "stopped_early.not_measured": ", ".join(stop["not_measured"]) or "none"}


def mlflow_section(tracker: Tracker) -> MlflowSection:
    out = MlflowSection(tracking_uri=tracker.uri, run_id=tracker.run_id,
                        experiment_id=tracker.experiment_id, ui=tracker.ui_link())
    if tracker.parent:
        out["parent_run_id"] = tracker.parent.run_id
    return out


def _gate_metrics(rec: DecisionRecord) -> dict[str, float]:
    gates = counted(rec.gates)
    return {**{f"gates.{status}": float(sum(g.status == status for g in gates))
               for status in ("pass", "fail", "inconclusive", "not_applicable",
                              "not_measured")},
            "gates.informational": float(len(rec.gates) - len(gates))}


def served_tags(rec: DecisionRecord) -> dict[str, str]:
    """A candidate served dense says so in tags: its speed and memory are not its own."""
    dense = rec.served_dense
    if not dense:
        return {}
    return {"served": "dense", "served.format": dense["format"],
            "served.not_judged": "latency, throughput and memory: " + dense["not_judged"]}


def log_run(tracker: Tracker, rec: DecisionRecord, sides: dict[str, Measurement],
            suites: list[tuple[str, Path, str]]) -> None:
    """Everything a finished run sends to MLflow: its name and description, metrics,
    tags, suites, a nested run per model with its load curves, the registered candidate.
    Also what `workbench log` sends for a run whose server was lost."""
    metrics = {**record_metrics(rec), **_gate_metrics(rec)}
    for role, m in sides.items():
        metrics.update({f"{role}.{k}": v for k, v in m.metrics().items()})
    tracker.log_metrics(metrics)
    _register(tracker, rec)  # first: the description (decision.md) names the rollback target
    tracker.set_tags({"decision": rec.decision, "gates": gate_counts(rec),
                      RUN_NAME_TAG: run_name(rec), DESCRIPTION_TAG: description(rec),
                      **stopped_tags(rec), **served_tags(rec)})
    tracker.log_suites(suites)
    for role, m in sides.items():
        with tracker.nested(role, {"role": role, "model_path": m.server.model_path}):
            tracker.log_metrics({k.removeprefix(f"{role}."): v for k, v in
                                 metrics.items() if k.startswith(f"{role}.")})
            tracker.log_series(m.load.series())
            tracker.log_steps(m.load.telemetry_steps())


def _register(tracker: Tracker, rec: DecisionRecord) -> None:
    """The candidate as a registered model version; the record keeps what was moved."""
    checkpoint = rec.model.get("candidate_path", "")
    if not checkpoint:
        return  # an endpoint's candidate: already deployed, no artifact here to register
    registry = tracker.register_candidate(
        rec.model["name"], Path(checkpoint).resolve().as_uri(), rec.decision,
        {"candidate": rec.candidate, "gates": gate_counts(rec), "run_dir": rec.run_dir},
        move_alias=tracker.parent is None)
    if registry:
        rec.mlflow["registry"] = registry


def tracking_line(tracker: Tracker, run_dir: Path) -> str:
    """The console's last word on MLflow: where the run is, or how to log it later."""
    if tracker.lost is None:
        return f"run {tracker.run_id} ({tracker.uri}; UI: {tracker.ui_link()})"
    return (f"[yellow]incomplete[/] ({escape(tracker.lost)}); log it later: "
            f"workbench log {escape(str(run_dir))}")
