"""The main job, top to bottom: validate -> quantise -> measure baseline and candidate ->
compare & gate -> record. Each stage's result is saved in the run folder as it completes.
"""

from __future__ import annotations

import functools
import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import yaml
from rich.console import Console
from rich.markup import escape

from .compare import compare_suite
from .config import DEFAULT_PRICE_PER_HOUR, Candidate, EndpointConfig, RunConfig
from .digests import folder_digest
from .errors import InfraError, InputError
from .evaluate.fidelity import compare_fidelity
from .evaluate.health import health_summary
from .evaluate.runner import SuiteResult
from .files import inside
from .loadtest import LoadResult, cost_figures
from .measure import (
    MEASUREMENT_FILE,
    SAMPLING,
    Measurement,
    baseline_key,
    cached_measurement,
    cached_pair,
    load_cached,
    load_pair,
    measure,
    pair_key,
    store_in_cache,
    store_pair,
)
from .plots import LATENCY_PLOT, plot_latency_vs_throughput
from .preflight import Outputs, Plan, check_candidates, plan, unreachable
from .quantize import QuantizeResult, quantize, show_candidates
from .quantize.checks import serving_problem
from .record import (
    DecisionRecord,
    Sampling,
    gate_counts,
    host_facts,
    print_decision,
    record_metrics,
    write_json,
    write_record,
)
from .regate import POLICY_FILE
from .sections import CostSection, EndpointSection, SuitePair
from .serve import ServerInfo, detect_device
from .tracking import Tracker, tracking_uri
from .verdict import judge

__all__ = ["Measured", "endpoint_section", "evaluate_planned", "log_run", "measure_planned",
           "new_run_dir", "run_evaluate", "run_quantize", "tracker_for"]


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


def _quantize_stage(p: Plan, run_dir: Path, console: Console) -> QuantizeResult:
    ep = p.cfg.endpoints.candidate
    if ep is not None:
        console.print(f"[green]✓[/] quantise {p.candidate_name}: nothing to build, it is "
                      f"served at {ep.url} (its recipe is recorded as declared)")
        q = QuantizeResult(candidate=p.candidate_name, path="", cache_hit=False, key="",
                           manifest={"candidate": p.candidate_name, "source": "endpoint",
                                     "recipe": p.candidate.model_dump(mode="json")},
                           source="endpoint", serve_args=[])
        write_json(run_dir / "quantize.json", q.to_dict())
        return q
    return _quantize_one(p.cfg, p.candidate_name, p.candidate, p.model_dir, p.model_digest,
                         run_dir, console)


def _quantize_one(cfg: RunConfig, name: str, cand: Candidate, model_dir: Path,
                  model_digest: str, run_dir: Path, console: Console) -> QuantizeResult:
    what = f"quantising {name} ({cand.recipe or cand.recipe_file or 'checkpoint'})"
    def progress(step: str) -> None:
        if step.startswith("cached artifact dropped"):  # worth a line that stays
            console.print(f"[yellow]![/] {escape(step)}")
        status.update(f"{what} {step}")

    with console.status(what) as status:
        q = quantize(cfg, name, cand, model_dir, model_digest, run_dir / "quantize.log",
                     on_progress=progress)
    console.print(f"[green]✓[/] quantise {name}: {_quantize_summary(q)}")
    write_json(run_dir / "quantize.json", q.to_dict())
    return q


def _baseline_stage(p: Plan, run_dir: Path, device: str, console: Console
                    ) -> tuple[Measurement, bool]:
    key = baseline_key(p.cfg, p.model_digest, p.suites, device, p.engine_version, p.requests)
    cached = cached_measurement(key)
    if p.cfg.endpoints.baseline is not None:
        console.print(f"[bold]baseline[/]: measuring at {p.cfg.endpoints.baseline.url} "
                      "(an endpoint: never cached)")
        return measure(p.cfg, "baseline", p.model_dir, p.cfg.model.name, [], p.suites,
                       p.requests, p.model_dir, run_dir / "baseline", console, device), False
    hit = load_cached(cached, lambda why: console.print(
        f"[yellow]![/] cached baseline results dropped, measuring again: {escape(why)}"))
    if hit is not None:
        shutil.copytree(cached, run_dir / "baseline", dirs_exist_ok=True)
        console.print(f"[green]✓[/] baseline: reused cached results ({cached}); its load "
                      "test runs again now, beside the candidate's (latency is compared only "
                      "between sessions measured together)")
        fresh = _load_session(p, "baseline", p.model_dir, [], run_dir / "baseline", console,
                              device)
        m = replace(hit, load=fresh.load)
        write_json(run_dir / "baseline" / MEASUREMENT_FILE, m.to_dict())
        return m, True
    console.print("[bold]baseline[/]: measuring (cached afterwards)")
    m = measure(p.cfg, "baseline", p.model_dir, p.cfg.model.name, [], p.suites, p.requests,
                p.model_dir, run_dir / "baseline", console, device)
    store_in_cache(run_dir / "baseline", cached)
    return m, False


def _candidate_stage(p: Plan, q: QuantizeResult, run_dir: Path, device: str,
                     console: Console) -> Measurement:
    console.print(f"[bold]candidate {p.candidate_name}[/]: measuring")
    return measure(p.cfg, "candidate", Path(q.path or p.model_dir), _served_name(p, "candidate"),
                   q.serve_args, p.suites, p.requests, p.model_dir, run_dir / "candidate",
                   console, device)


def _served_name(p: Plan, role: str) -> str:
    return p.cfg.model.name if role == "baseline" else f"{p.cfg.model.name}-{p.candidate_name}"


def _load_session(p: Plan, role: str, model_dir: Path, serve_args: list[str], out_dir: Path,
                  console: Console, device: str, ceiling: bool = True) -> Measurement:
    """An engine session that runs the load test alone."""
    return measure(p.cfg, role, model_dir, _served_name(p, role), serve_args, [], p.requests,
                   p.model_dir, out_dir, console, device, ceiling)


def _later_rounds(p: Plan, q: QuantizeResult, base: Measurement, cand: Measurement,
                  run_dir: Path, device: str, console: Console
                  ) -> tuple[Measurement, Measurement]:
    """The load test again in fresh engine sessions, baseline and candidate in turn, so
    that the latency gates see the variance between sessions (load.rounds)."""
    if p.cfg.load.rounds < 2:
        return base, cand
    sides = {"baseline": (base, p.model_dir, []), "candidate": (cand, Path(q.path),
                                                                q.serve_args)}
    later: dict[str, list[LoadResult]] = {"baseline": [], "candidate": []}
    for r in range(2, p.cfg.load.rounds + 1):
        for role, (_, model_dir, args) in sides.items():
            console.print(f"[bold]{role}[/]: load round {r} of {p.cfg.load.rounds} "
                          "(a fresh engine session)")
            later[role].append(_load_session(p, role, model_dir, args,
                                             run_dir / role / f"round-{r}", console,
                                             device, ceiling=False).load)
    out = []
    for role, (m, _, _) in sides.items():
        m = replace(m, load=replace(m.load, rounds=later[role]))
        write_json(run_dir / role / MEASUREMENT_FILE, m.to_dict())
        out.append(m)
    return out[0], out[1]


def _cost(p: Plan, role: str, load: LoadResult) -> CostSection:
    """Cost at the highest load level that met the SLO (the highest level, when the
    workload declares no SLO), for every device the engine holds (load.price_per_hour is
    per device)."""
    work = p.cfg.workload
    per_device = work.price_per_hour or DEFAULT_PRICE_PER_HOUR[p.device]
    devices = p.devices(role)
    heaviest = load.levels[-1] if load.levels else None
    level = load.max_stable_level() if work.slo is not None else heaviest
    source = "config" if work.price_per_hour else f"illustrative default for {p.device}"
    return {**cost_figures(level, per_device * devices), "devices": devices,
            "price_per_device_hour": per_device,
            "price_source": f"{source}, x {devices} devices" if devices > 1 else source}


def _sampling(p: Plan) -> Sampling:
    """How every suite was decoded: the settings a rerun must repeat."""
    return {**SAMPLING, "seed": p.cfg.seed, "profile": p.cfg.profile,
            "max_tokens": {s.name: s.spec.max_tokens for s in p.suites
                           if s.spec.scoring not in ("choice", "logprobs", "lm-eval")},
            "guided_decoding": "response_format json_schema (xgrammar, no free whitespace)"}


def _paired_summaries(p: Plan, base: Measurement, cand: Measurement
                      ) -> dict[str, SuitePair]:
    def summary(r: SuiteResult) -> dict:
        out = {"n": r.n, "kind": r.kind, "accuracy": r.accuracy, "slices": r.slices,
               "metrics": r.metrics, "digest": r.digest}
        return {**out, "health": health_summary(r.items)} if r.generates else out

    out = {}
    for name in base.suites:
        if name not in cand.suites:
            continue
        b, c = base.suites[name], cand.suites[name]
        out[name] = {"baseline": summary(b), "candidate": summary(c)}
        if b.kind != "fidelity":
            compared = compare_suite(b, c, p.policy.confidence, p.policy.bootstrap_resamples,
                                     p.cfg.seed)
            overall = compared.get("(all)", {})
            out[name]["flips"] = {"paired": overall.get("n", 0),
                                  "to_wrong": overall.get("flips_to_wrong", 0),
                                  "to_right": overall.get("flips_to_right", 0)}
            out[name]["comparison"] = compared
            if b.generates and c.generates:
                out[name]["health_comparison"] = compare_suite(
                    b, c, p.policy.confidence, p.policy.bootstrap_resamples, p.cfg.seed,
                    metric="healthy")
    return out


def fidelity_results(p: Plan, run_dir: Path) -> dict[str, dict]:
    """Token-level fidelity for every fidelity suite, from both runs' stored log-probs."""
    out = {}
    for suite in p.suites:
        if suite.spec.kind != "fidelity":
            continue
        base, cand = (run_dir / role / f"logprobs-{suite.name}.jsonl"
                      for role in ("baseline", "candidate"))
        if base.is_file() and cand.is_file():
            slices = {it.id: it.slices for it in suite.items}
            out[suite.name] = compare_fidelity(suite.name, base, cand, slices).to_dict()
    return out


def _plots(p: Plan, base: Measurement, cand: Measurement, run_dir: Path) -> dict[str, str]:
    title = (f"{p.cfg.model.name}: baseline vs {p.candidate_name}, load profile "
             f"{p.cfg.load.profile!r} on {p.device}")
    path = plot_latency_vs_throughput({"baseline": base.load, "candidate": cand.load}, title,
                                      run_dir / LATENCY_PLOT)
    return {"latency vs throughput": path.name}


def build_record(p: Plan, q: QuantizeResult, base: Measurement, cand: Measurement,
                 run_dir: Path, reused: dict, tracker: Tracker) -> DecisionRecord:
    fidelity = fidelity_results(p, run_dir)
    report = judge(p.policy, p.cfg.resolve(p.cfg.gates), base, cand, fidelity, p.device,
                   run_dir, p.cfg.seed)
    return DecisionRecord(
        decision=report.decision,
        policy=report.policy,
        candidate=p.candidate_name,
        model={"name": p.cfg.model.name, "path": str(p.model_dir),
               "digest": p.model_digest, "candidate_path": q.path,
               **({"hub": p.hub} if p.hub else {})},
        device=host_facts(p.device),
        gates=report.gates,
        suites=_paired_summaries(p, base, cand),
        fidelity=fidelity,
        load={"baseline": base.load.to_dict(), "candidate": cand.load.to_dict()},
        headroom={"baseline": base.headroom, "candidate": cand.headroom},
        cost={role: _cost(p, role, m.load) for role, m in (("baseline", base),
                                                            ("candidate", cand))},
        engine={"version": p.engine_version, "config": p.cfg.engine.model_dump(),
                "baseline_command": base.server.command,
                "candidate_command": cand.server.command,
                "baseline_cache": base.server.cache_info,
                "candidate_cache": cand.server.cache_info,
                "kernels": {role: m.server.kernels
                            for role, m in (("baseline", base), ("candidate", cand))},
                "cold_start": {role: {"healthy_s": m.server.cold_start_s,
                                      "first_token_s": m.server.first_token_s}
                               for role, m in (("baseline", base), ("candidate", cand))
                               if not m.server.endpoint}},
        quantization={**q.manifest, "serve_args": q.serve_args,
                      **({"served_format": q.format.to_dict()} if q.path else {})},
        endpoints={role: endpoint_section(p.cfg.endpoints.of(role), m.server)
                   for role, m in (("baseline", base), ("candidate", cand))
                   if m.server.endpoint},
        data_digests={s.name: s.digest for s in p.suites},
        seeds={"run": p.cfg.seed, "load": p.cfg.workload.seed,
               "calibration": p.cfg.calibration.seed},
        sampling=_sampling(p),
        library_versions={"engine": p.engine_version,
                          **q.manifest.get("library_versions", {})},
        run_dir=str(run_dir),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        reused=reused,
        plots=_plots(p, base, cand, run_dir),
        mlflow={"tracking_uri": tracker.uri, "run_id": tracker.run_id,
                "experiment_id": tracker.experiment_id, "ui": tracker.ui_link(),
                **({"parent_run_id": tracker.parent.run_id} if tracker.parent else {})},
    )


def endpoint_section(ep: EndpointConfig | None, server: ServerInfo) -> EndpointSection:
    """What the record keeps of an endpoint: where, what it served, how it was asked
    (the key's variable, never the key) and what could not be measured there."""
    env = ep.api_key_env if ep else None
    return {"url": server.endpoint, "model": server.served_name, "version": server.version,
            "auth": f"bearer token from ${env}" if env else "none",
            "devices": ep.devices if ep else 1, "unmeasured": list(server.unmeasured)}


def new_run_dir(root: Path, label: str) -> Path:
    """A new folder <time>-<label> under root, never one another run already holds (two
    runs started in the same second get -2, -3, ...), always inside root."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        run_dir = inside(root, f"{stamp}-{label}" + (f"-{n}" if n > 1 else ""))
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            continue
    raise InfraError(f"{root}: no free run folder name for {stamp}-{label}")


def tracker_for(cfg: RunConfig, label: str, tags: dict[str, str], console: Console,
                parent: Tracker | None = None) -> Tracker:
    """A run's MLflow tracker (named <model>:<label>); without MLflow when the config allows
    a server that does not answer (preflight refused it otherwise), or when the parent's
    server was lost."""
    if parent is None:
        enabled = cfg.tracking.required or unreachable(tracking_uri(cfg.tracking)) is None
        if not enabled:
            console.print(f"[yellow]![/] tracking server {tracking_uri(cfg.tracking)} does "
                          "not answer; running without MLflow (tracking.required: false)")
    else:
        enabled = parent.lost is None
    return Tracker(cfg.tracking, f"{cfg.model.name}:{label}",
                   {"model": cfg.model.name, **tags},
                   on_lost=lambda why: console.print(
                       f"[yellow]![/] MLflow lost ({escape(why)}): the run goes on and is "
                       "recorded locally; what was not logged is listed in decision.json"),
                   enabled=enabled, parent=parent)


def run_evaluate(cfg: RunConfig, candidate: str, runs_root: Path, console: Console,
                 outputs: Outputs | None = None, remeasure: bool = False) -> DecisionRecord:
    p = plan(cfg, candidate, outputs or Outputs(runs_dir=runs_root))
    return evaluate_planned(p, new_run_dir(runs_root, candidate), console, remeasure)


Measured = tuple[QuantizeResult, Measurement, Measurement, dict[str, bool]]


def measure_planned(p: Plan, run_dir: Path, console: Console, remeasure: bool) -> Measured:
    """The stages that need an engine: quantise, then measure the pair. A sweep fanned out
    on Ray runs this in a task on the candidate's devices (fanout.py)."""
    with stage("quantise", run_dir):
        q = _quantize_stage(p, run_dir, console)
    if p.candidate.recipe_file is not None and q.path:  # its format is known only now
        unsupported = serving_problem(p.cfg, p.candidate_name, p.device, Path(q.path))
        if unsupported:
            raise InputError(unsupported)
    with stage("measure", run_dir):
        base, cand, reused = _measure_pair(p, q, run_dir, console, remeasure)
    return q, base, cand, reused


def evaluate_planned(p: Plan, run_dir: Path, console: Console, remeasure: bool = False,
                     parent: Tracker | None = None,
                     measured: Callable[[], Measured] | None = None) -> DecisionRecord:
    """One candidate against its baseline, its inputs already checked (plan()): quantise,
    measure the pair, judge, record. `sweep` calls this for each of its candidates, as a
    child run of the sweep's MLflow run (parent); a fanned-out sweep passes `measured`,
    which hands over what a Ray task measured (or raises what it failed with)."""
    cfg, candidate, device = p.cfg, p.candidate_name, p.device
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    shutil.copyfile(cfg.resolve(cfg.gates), run_dir / POLICY_FILE)  # for `workbench gate`
    console.print(f"run folder {run_dir} · device {device} · engine {p.engine_version}")
    started = time.perf_counter()
    with tracker_for(cfg, candidate, {"candidate": candidate, "device": device}, console,
                     parent) as tracker:
        tracker.log_params({"candidate": candidate, "recipe": p.candidate.model_dump_json(),
                            "model_path": str(p.model_dir), "device": device,
                            "engine": p.engine_version, "engine_config":
                            cfg.engine.model_dump_json(), "suites": ",".join(cfg.suites),
                            "profile": cfg.profile, "load_profile": cfg.load.profile,
                            "load": cfg.workload.model_dump_json(),
                            "gates": str(cfg.resolve(cfg.gates)), "run_dir": str(run_dir)})
        try:
            q, base, cand, reused = (measured or functools.partial(
                measure_planned, p, run_dir, console, remeasure))()
            with stage("record", run_dir):
                rec = build_record(p, q, base, cand, run_dir,
                                   {"quantized_artifact": q.cache_hit, **reused}, tracker)
                write_record(run_dir, rec)
                write_json(run_dir / "timing.json",
                           {"wall_time_s": round(time.perf_counter() - started, 2)})
            log_run(tracker, rec, base, cand, [(s.name, s.path, s.digest) for s in p.suites],
                    q.path)
        finally:
            tracker.log_artifacts(run_dir)  # partial results too, when a stage failed
    rec.mlflow.update(tracker.status())  # type: ignore[typeddict-item]
    write_record(run_dir, rec)
    print_decision(rec, console)
    console.print(f"decision record: {run_dir / 'decision.json'} · MLflow "
                  f"{_tracking_line(tracker, run_dir)} · {time.perf_counter() - started:.0f}s")
    return rec


def _measure_pair(p: Plan, q: QuantizeResult, run_dir: Path, console: Console,
                  remeasure: bool) -> tuple[Measurement, Measurement, dict[str, bool]]:
    """Baseline and candidate, measured together. A pair measured before with nothing
    changed comes from the cache whole (suites, load rounds, headroom of both): latency is
    still compared only between sessions that ran side by side."""
    if p.endpoint_roles:
        # what an endpoint serves can change under the same URL: measured every time
        base, cand = _baseline_stage(p, run_dir, p.device, console)[0], _candidate_stage(
            p, q, run_dir, p.device, console)
        base, cand = _later_rounds(p, q, base, cand, run_dir, p.device, console)
        return base, cand, {"baseline_results": False, "measurement_pair": False}
    key = pair_key(baseline_key(p.cfg, p.model_digest, p.suites, p.device, p.engine_version,
                                p.requests), _what_the_candidate_serves(p, q))
    folder = cached_pair(key)
    if remeasure:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        hit = load_pair(folder, lambda why: console.print(
            f"[yellow]![/] cached measurement dropped, measuring again: {escape(why)}"))
        if hit is not None:
            for role in ("baseline", "candidate"):
                shutil.copytree(folder / role, run_dir / role, dirs_exist_ok=True)
            console.print(f"[green]✓[/] baseline and {p.candidate_name}: reused the pair "
                          f"measured together ({folder}); --remeasure measures them again")
            return hit[0], hit[1], {"baseline_results": True, "measurement_pair": True}
    base, base_hit = _baseline_stage(p, run_dir, p.device, console)
    cand = _candidate_stage(p, q, run_dir, p.device, console)
    base, cand = _later_rounds(p, q, base, cand, run_dir, p.device, console)
    store_pair(run_dir, folder)
    return base, cand, {"baseline_results": base_hit, "measurement_pair": False}


def _what_the_candidate_serves(p: Plan, q: QuantizeResult) -> dict:
    # not q.source: an artifact built now and the same one found in the cache later are
    # the same weights, and their measurement is the same measurement
    return {"candidate": p.candidate.model_dump(mode="json"), "artifact": q.key,
            "serve_args": q.serve_args,
            "served_name": _served_name(p, "candidate"), "rounds": p.cfg.load.rounds}


def _tracking_line(tracker: Tracker, run_dir: Path) -> str:
    if tracker.lost is None:
        return f"run {tracker.run_id} ({tracker.uri}; UI: {tracker.ui_link()})"
    return (f"[yellow]incomplete[/] ({escape(tracker.lost)}); log it later: "
            f"workbench log {escape(str(run_dir))}")


def log_run(tracker: Tracker, rec: DecisionRecord, base: Measurement, cand: Measurement,
            suites: list[tuple[str, Path, str]], candidate_path: str) -> None:
    """Everything a finished run sends to MLflow: metrics, tags, suites, a nested run per
    model with its load curves, the registered candidate. Also what `workbench log` sends
    for a run whose server was lost."""
    metrics = record_metrics(rec)
    for role, m in (("baseline", base), ("candidate", cand)):
        metrics.update({f"{role}.{k}": v for k, v in m.metrics().items()})
    tracker.log_metrics(metrics)
    tracker.set_tags({"decision": rec.decision, "gates": gate_counts(rec)})
    tracker.log_suites(suites)
    for role, m in (("baseline", base), ("candidate", cand)):
        with tracker.nested(role, {"role": role, "model_path": m.server.model_path}):
            tracker.log_metrics({k.removeprefix(f"{role}."): v for k, v in
                                 metrics.items() if k.startswith(f"{role}.")})
            tracker.log_series(m.load.series())
    if not candidate_path:
        return  # an endpoint's candidate: already deployed, no artifact here to register
    registry = tracker.register_candidate(
        rec.model["name"], Path(candidate_path).resolve().as_uri(), rec.decision,
        {"candidate": rec.candidate, "gates": gate_counts(rec), "run_dir": rec.run_dir},
        move_alias=tracker.parent is None)
    if registry:
        rec.mlflow["registry"] = registry


def log_stored_run(run_dir: Path, console: Console) -> None:
    """`workbench log`: a finished run folder sent to MLflow as a new run (tagged with the
    folder), for a run whose tracking server was down or lost; decision.json then says so."""
    from .config import load_config
    from .evaluate.suites import find_suite_dir
    from .preflight import tracking_problems
    from .regate import load_record, stored_measurement

    rec = load_record(run_dir)
    base, cand = stored_measurement(run_dir, "baseline"), stored_measurement(run_dir,
                                                                             "candidate")
    if base is None or cand is None:
        raise InputError(f"{run_dir}: no baseline and candidate measurement.json to log")
    cfg = load_config(run_dir / "config.yaml")
    problems = tracking_problems(cfg)
    if problems:
        raise InputError(problems[0], problems)
    suites = []
    for name, digest in rec.data_digests.items():
        try:
            suites.append((name, find_suite_dir(name), digest))
        except InputError:
            suites.append((name, run_dir, digest))
    tags = {"candidate": rec.candidate, "model": rec.model["name"],
            "device": rec.device.get("kind", ""), "logged_from": str(run_dir.resolve())}
    with Tracker(cfg.tracking, f"{rec.model['name']}:{rec.candidate}", tags) as tracker:
        log_run(tracker, rec, base, cand, suites, rec.model.get("candidate_path", ""))
        tracker.log_artifacts(run_dir)
    if tracker.lost is not None:
        raise InfraError(f"MLflow at {tracker.uri}: {tracker.lost}")
    rec.mlflow = {"tracking_uri": tracker.uri, "run_id": tracker.run_id,
                  "experiment_id": tracker.experiment_id, **tracker.status(),
                  "logged_later": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  **({"registry": rec.mlflow["registry"]} if "registry" in rec.mlflow else {})}
    write_record(run_dir, rec)
    console.print(f"logged {run_dir} to MLflow run {tracker.run_id} ({tracker.uri})")


def _quantize_summary(q: QuantizeResult) -> str:
    m = q.manifest
    text = {"cache": f"reused cached artifact {q.path}",
            "built": f"built in {m.get('wall_time_s', 0):.0f}s -> {q.path}",
            "checkpoint": f"ready checkpoint {q.path}",
            "endpoint": "served at an endpoint",
            "baseline weights": "baseline weights, served with " + (
                " ".join(q.serve_args) or "the baseline's arguments")}[q.source]
    fid = m.get("fidelity")
    if fid:
        text += (f" · held-out perplexity {fid['baseline_perplexity']:.2f} -> "
                 f"{fid['candidate_perplexity']:.2f} (x{fid['perplexity_ratio']:.3f})")
    return text


def run_quantize(cfg: RunConfig, candidates: list[str], runs_root: Path,
                 console: Console) -> list[QuantizeResult]:
    """Build (or find) each candidate's checkpoint; say which ones this device can serve.

    Needs only the model and the candidates: suites and gates are not loaded."""
    check_candidates(cfg, candidates, Outputs(runs_dir=runs_root), serving=False)
    model_dir = cfg.model.resolved_path(cfg.base_dir)
    run_dir = new_run_dir(runs_root, "quantize-" + "-".join(candidates)[:80])
    digest = folder_digest(model_dir)
    results = []
    for name in candidates:
        sub = run_dir / name if len(candidates) > 1 else run_dir
        sub.mkdir(exist_ok=True)
        results.append(_quantize_one(cfg, name, cfg.candidate(name), model_dir, digest, sub,
                                     console))
    write_json(run_dir / "quantize-summary.json", [q.to_dict() for q in results])
    if len(results) == 1:
        console.print_json(json.dumps(results[0].manifest, default=str))
    show_candidates(cfg, results, detect_device(), console)
    return results
