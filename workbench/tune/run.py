"""`workbench tune`, top to bottom: plan -> layer sensitivity (where a trial keeps blocks
in 16-bit) -> trials judged on the search half -> the chosen trial judged on the held-out
half -> record, recipe, MLflow.

Every trial is an ordinary candidate through evaluate's own stages
(pipeline.evaluate_planned), into `runs/<tune>/<trial>/` with its own decision record and
MLflow child run: the candidate's recipe with its k most sensitive blocks kept in 16-bit,
or, where the config declares `tune.space`, a point of that space of recipes (walk.py).
Its artifact and its measurement beside the baseline are cached by content, so a tune run
again, after an interruption or with a larger budget, measures only what is missing.
docs/tune.md says why each step is the way it is.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from workbench.config.candidate import GROUPED_RECIPES
from workbench.config.gate_policy import Objective
from workbench.config.run_config import RunConfig
from workbench.config.tune import TuneSpace
from workbench.mechanisms.errors import InfraError, InputError
from workbench.mechanisms.files import inside, new_run_dir
from workbench.pipeline.quantize import quantize_planned
from workbench.plan.plan import Outputs, Plan, plan
from workbench.quantize.sensitivity import (
    Sensitivity,
    measure_sensitivity,
    sensitivity_problems,
)
from workbench.record.sections import MlflowSection
from workbench.record.store import load_record
from workbench.suites.split import ItemSplit
from workbench.sweep.run import evaluate_row, table_record
from workbench.sweep.table import SweepRecord, SweepRow
from workbench.tracking.run_log import DESCRIPTION_TAG, RUN_NAME_TAG, tracker_for
from workbench.tracking.tracker import Tracker
from workbench.tune.budget import Budget, next_trial_s
from workbench.tune.outcome import Search, outcome, pick_trial
from workbench.tune.proxies import ORDERING_PROXY, order_by_proxy
from workbench.tune.record import (
    TUNE_PLOT,
    PointJson,
    SensitivityJson,
    SpaceJson,
    TuneRecord,
    print_tune,
    render_tune,
    write_tune,
)
from workbench.tune.space import SpacePoint, points
from workbench.tune.trials import TrialSpec, keep_spec, point_spec, trial_config
from workbench.tune.walk import Runner, search_kept, walk_space

__all__ = ["Search", "check_tune", "pick_trial", "run_tune"]

METHOD = ("token KL(baseline || baseline with only this block's Linear weights rounded to "
          "the candidate's grid) on the held-out passages")
PROTECTION = ("each trial was judged on the search half of every suite's items; the chosen "
              "trial's final decision is judged on the other half, whose outcomes no search "
              "step read (docs/tune.md). The load test and memory figures are not item by "
              "item: the confirmation reads the chosen trial's own load sessions.")


def check_tune(p: Plan, budget: Budget) -> None:
    """Tune's own checks on top of evaluate's (plan()): exit 2 before anything is written."""
    space = p.cfg.tune.space
    problems = space_problems(p, space) if space is not None else []
    if space is None or max(space.keep) > 0:
        problems += sensitivity_problems(p.cfg, p.candidate_name)
    if budget.max_trials < 1:
        problems.append(f"--max-trials: {budget.max_trials} (at least 1)")
    if not budget.max_hours > 0:
        problems.append(f"--max-hours: {budget.max_hours} (more than 0)")
    if p.cfg.endpoints.baseline is not None or p.cfg.endpoints.candidate is not None:
        problems.append(f"{p.cfg.source}: endpoints: tune builds and serves its trials "
                        "itself; run it without endpoints")
    if problems:
        raise InputError(problems[0], problems)


def space_problems(p: Plan, space: TuneSpace) -> list[str]:
    """A space varies an integer weight-only recipe, and this device and the model's widths
    must take at least one of its points (each block stands in for the ranking here)."""
    where, cand = f"{p.cfg.source}: tune.space", p.candidate
    if cand.recipe not in GROUPED_RECIPES:
        return [f"{where}: candidates.{p.candidate_name} is "
                f"{cand.recipe or 'a recipe file or checkpoint'}; a space of recipes varies "
                f"an integer weight-only recipe ({', '.join(GROUPED_RECIPES)})"]
    blocks = json.loads((p.model_dir / "config.json").read_text())
    blocks = blocks.get("text_config", blocks).get("num_hidden_layers", 0)
    kept, left = points(p.candidate_name, cand, space, p.model_dir, p.device,
                        list(range(blocks)))
    if kept:
        return []
    return [f"{where}: no point of the space can be built and served here: "
            + "; ".join(f"{name}: {why}" for name, why in left[:3])]


def run_tune(cfg: RunConfig, name: str, runs_root: Path, console: Console,
             budget: Budget) -> TuneRecord:
    """Every input checked (exit 2, nothing written), then the search, the confirmation
    and the record in a new folder runs/<time>-tune-<candidate>/."""
    base = plan(cfg, name, Outputs(runs_dir=runs_root))
    check_tune(base, budget)
    tune_dir = new_run_dir(runs_root, f"tune-{name}")
    console.print(f"tune folder {tune_dir}: {name}, at most {budget.max_trials} trials and "
                  f"{budget.max_hours:g} h")
    started = time.perf_counter()
    tags = {"kind": "tune", "candidate": name, "device": base.device}
    with tracker_for(cfg, f"tune {name}", tags, console) as tracker:
        run = functools.partial(_trial, base, tune_dir=tune_dir, console=console,
                                tracker=tracker, budget=budget,
                                deadline=started + budget.max_hours * 3600)
        sens, search, space = _search(base, tune_dir, console, run, budget, started)
        trials = _table(base, search, tune_dir, started, budget.objective)
        chosen = None if search.failed else pick_trial(search, trials)
        confirmation = None if chosen is None else run(search.specs[chosen], part="confirm")
        record = _record(base, sens, search, trials, (chosen, confirmation), budget,
                         tune_dir, started, tracker)
        record.space = space
        write_tune(tune_dir, record)
        _log_tune(tracker, record, tune_dir)
        if record.outcome.status == "failed":  # exit 3, the MLflow run marked failed
            print_tune(record, console)
            raise InfraError(f"tune stopped: {record.outcome.reason}; the trials so far are "
                             f"in {tune_dir / 'tune.json'} (run tune again to resume)")
    record.mlflow.update(tracker.status())
    write_tune(tune_dir, record)
    print_tune(record, console)
    return record


def _search(p: Plan, tune_dir: Path, console: Console, run: Runner, budget: Budget,
            started: float) -> tuple[Sensitivity | None, Search, SpaceJson | None]:
    """The keep-k search, or the walk over the config's space (walk.py); the sensitivity
    ranking first where a trial keeps blocks in 16-bit."""
    space, name = p.cfg.tune.space, p.candidate_name
    sens = (_sensitivity(p, tune_dir, console)
            if space is None or max(space.keep) > 0 else None)
    suite_runs = sum(len(list(s.spec.runs())) for s in p.suites)
    rounds = p.cfg.load.rounds
    if space is None:
        def price(rows: Iterable[SweepRow], _spec: TrialSpec) -> float:
            return next_trial_s(rows, suite_runs, rounds=rounds)  # keep-k: built alike
        assert sens is not None  # measured above for the keep-k search
        spec_for = functools.partial(keep_spec, name, p.candidate, sens)
        return sens, search_kept(spec_for, len(sens.blocks), run, budget, started, price), None
    pts, left = points(name, p.candidate, space, p.model_dir, p.device,
                       sens.ranked() if sens else None)
    _say_space(pts, left, console)
    ratios: dict[str, float | None] = {}
    rank = functools.partial(_by_perplexity, p, tune_dir, console, ratios) \
        if space.rank_equal_size else None
    methods = {pt.name: pt.candidate.resolved_method for pt in pts}

    def price_point(rows: Iterable[SweepRow], spec: TrialSpec) -> float:
        method = methods.get(spec.name)
        return next_trial_s(rows, suite_runs, lambda name: methods.get(name) == method,
                            rounds)

    search = walk_space([point_spec(pt) for pt in pts], run, budget, started, price_point,
                        rank=rank)
    return sens, search, _space_json(space, pts, left, search.order, ratios)


def _by_perplexity(p: Plan, tune_dir: Path, console: Console, ratios: dict[str, float | None],
                   tier: list[TrialSpec]) -> list[TrialSpec]:
    """Points of equal size built (cached by content: their trials find the builds again)
    and ordered by their held-out perplexity ratio, the proxy known before any engine
    starts; a build that fails keeps its place and fails again in its own trial."""
    console.print(f"[bold]ranking[/] {len(tier)} points of equal size by held-out perplexity: "
                  + ", ".join(s.name for s in tier))
    for spec in tier:
        trial = p.variant(trial_config(p.cfg, spec), spec.name, ItemSplit("search", p.cfg.seed))
        folder = inside(tune_dir, "builds", spec.name)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            q = quantize_planned(trial, folder, console)
        except Exception as exc:  # noqa: BLE001 - the trial meets it again, and says so
            console.print(f"  [yellow]![/] {spec.name} not ranked: {escape(str(exc))}")
            ratios[spec.name] = None
            continue
        ratios[spec.name] = (q.manifest.get("fidelity") or {}).get(ORDERING_PROXY)
    by_name = {s.name: s for s in tier}
    ordered = [by_name[n] for n in order_by_proxy([s.name for s in tier], ratios)]
    console.print("  order: " + ", ".join(f"{s.name} ({_ratio_text(ratios.get(s.name))})"
                                          for s in ordered))
    return ordered


def _ratio_text(ratio: float | None) -> str:
    return "not built" if ratio is None else f"perplexity x{ratio:.3f}"


def _sensitivity(p: Plan, tune_dir: Path, console: Console) -> Sensitivity:
    console.print(f"[bold]layer sensitivity[/] of {p.candidate_name}: each decoder block "
                  "alone rounded to its grid (cached by content)")
    sens = measure_sensitivity(p.cfg, p.candidate_name, p.candidate, p.model_dir,
                               p.model_digest, tune_dir / "sensitivity",
                               lambda line: console.print(f"  {escape(line)}"),
                               device=p.device)
    top = ", ".join(str(b) for b in sens.ranked()[:5])
    console.print(f"[green]✓[/] {len(sens.blocks)} blocks, most sensitive first: {top} …"
                  + (" (cached)" if sens.cache_hit else f" ({sens.seconds:.0f} s)"))
    return sens


def _trial(p: Plan, spec: TrialSpec, tune_dir: Path, console: Console, tracker: Tracker,
           budget: Budget, deadline: float, part: str = "search") -> SweepRow:
    """One trial through evaluate's stages, judged on one half of the items. A search
    trial takes no second look that would end past the tune's --max-hours (budget.py);
    the confirmation of a promoted trial is not cut short by the budget."""
    trial = p.variant(trial_config(p.cfg, spec), spec.name,
                      ItemSplit("search" if part == "search" else "confirm", p.cfg.seed),
                      look_deadline=deadline if part == "search" else None)
    console.rule(f"{'trial' if part == 'search' else 'confirmation'} {spec.name}: "
                 f"{spec.label}, judged on the {part} half")
    folder = inside(tune_dir, spec.name if part == "search" else f"confirm-{spec.name}")
    return evaluate_row(trial, folder, console, False, tracker, budget.objective,
                        p.policy.sweep.quality, measure_all=budget.measure_all)


def _say_space(pts: list[SpacePoint], left: list[tuple[str, str]], console: Console) -> None:
    console.print(f"[bold]space[/]: {len(pts)} point(s), cheapest first: "
                  + ", ".join(f"{pt.name} ({pt.weight_bytes / 2**20:.0f} MiB)"
                              for pt in pts[:6]) + (" …" if len(pts) > 6 else ""))
    for name, why in left:
        console.print(f"  left out {name}: {escape(why)}")


def _space_json(space: TuneSpace, pts: list[SpacePoint], left: list[tuple[str, str]],
                order: list[str], ratios: dict[str, float | None]) -> SpaceJson:
    """The points in the order the walk tried them (or would have), each ranked one with
    its build's perplexity ratio."""
    place = {name: i for i, name in enumerate(order)}
    json_points: list[PointJson] = []
    for pt in sorted(pts, key=lambda pt: place.get(pt.name, len(place))):
        point = PointJson(name=pt.name, label=pt.label, values=pt.values(),
                          weight_bytes=pt.weight_bytes)
        if ratios.get(pt.name) is not None:
            point["perplexity_ratio"] = float(ratios[pt.name] or 0.0)
        json_points.append(point)
    return SpaceJson(axes=space.model_dump(), points=json_points,
                     left_out=[{"name": n, "why": why} for n, why in left])


def _table(p: Plan, search: Search, tune_dir: Path, started: float,
           objective: Objective) -> SweepRecord:
    """The trials as a sweep's table: ranked on the objective, quality retained on the
    search half (top-1 agreement when the policy gates no paired suite)."""
    rows = [search.rows[k] for k in search.rows]
    quality = p.policy.sweep.quality
    if all(r.quality is None for r in rows):
        quality = "top1_agreement"
        for r in rows:
            r.quality = r.top1_agreement
    return table_record(p.cfg, p.device, p.policy, rows, tune_dir, started, objective,
                        quality, " on the search half")


def _record(p: Plan, sens: Sensitivity | None, search: Search, trials: SweepRecord,
            picked: tuple[int | None, SweepRow | None], budget: Budget, tune_dir: Path,
            started: float, tracker: Tracker) -> TuneRecord:
    return TuneRecord(
        model=p.cfg.model.name, candidate=p.candidate_name, device=p.device,
        policy=trials.policy, sensitivity=None if sens is None else _sensitivity_json(sens),
        kept={r.candidate: search.kept(k) for k, r in search.rows.items()},
        trials=trials, stopped=search.stopped, max_trials=budget.max_trials,
        max_hours=budget.max_hours, protection=PROTECTION, confirmation=picked[1],
        outcome=outcome(p, search, picked, tune_dir, budget.objective),
        tune_dir=str(tune_dir),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        wall_time_s=round(time.perf_counter() - started, 1),
        mlflow=MlflowSection(tracking_uri=tracker.uri, run_id=tracker.run_id,
                             experiment_id=tracker.experiment_id, ui=tracker.ui_link()))


def _sensitivity_json(sens: Sensitivity) -> SensitivityJson:
    ranked = sorted(sens.blocks, key=lambda b: (-b.kl_mean, b.block))
    return SensitivityJson(
        method=METHOD, bits=sens.bits, group_size=sens.group_size,
        ranked=[{"block": b.block, "kl_mean": b.kl_mean,
                 "top1_agreement": b.top1_agreement} for b in ranked],
        passages=sens.passages, tokens=sens.tokens, seconds=sens.seconds,
        cache_hit=sens.cache_hit)


def _log_tune(tracker: Tracker, record: TuneRecord, tune_dir: Path) -> None:
    """The parent run: a figure per trial, the record, table and plot, the outcome as a
    tag and the confirmed trial's model version under the `tuned` alias."""
    metrics: dict[str, float] = {"trials": len(record.trials.rows)}
    for r in record.trials.rows:
        if r.quality is not None:
            metrics[f"{r.candidate}.quality"] = r.quality
        if r.weights_bytes is not None:
            metrics[f"{r.candidate}.weights_bytes"] = r.weights_bytes
    tracker.log_metrics(metrics)
    out = record.outcome
    tracker.set_tags({"tuned": (out.trial or "none") if out.status == "confirmed" else "none",
                      "outcome": out.status,
                      RUN_NAME_TAG: f"tune {record.candidate} · {len(record.trials.rows)} "
                                    f"trials · {out.status.replace('_', ' ')}",
                      DESCRIPTION_TAG: render_tune(record)})
    for name in ("tune.json", "tune.md", TUNE_PLOT):
        if (tune_dir / name).is_file():
            tracker.log_artifact(tune_dir / name)
    if out.status == "confirmed" and out.confirmation_dir:
        version = load_record(Path(out.confirmation_dir)).mlflow.get("registry", {}).get(
            "version")
        if version:
            tracker.set_alias(record.model, "tuned", version)
            record.mlflow["registry"] = {"registered_model": record.model, "version": version,
                                         "alias": "tuned"}
