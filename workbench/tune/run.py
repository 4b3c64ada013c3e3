"""`workbench tune`, top to bottom: plan -> layer sensitivity -> trials judged on the
search half -> the chosen trial judged on the held-out half -> record, recipe, MLflow.

Every trial is an ordinary candidate (the recipe with its k most sensitive blocks kept in
16-bit) through evaluate's own stages (pipeline.evaluate_planned), into
`runs/<tune>/<trial>/` with its own decision record and MLflow child run. Its artifact and
its measurement beside the baseline are cached by content, so a tune run again, after an
interruption or with a larger budget, measures only what is missing. docs/tune.md says
why each step is the way it is.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import yaml
from rich.console import Console
from rich.markup import escape

from workbench.config.gate_policy import Objective
from workbench.config.run_config import RunConfig
from workbench.mechanisms.errors import InfraError, InputError
from workbench.mechanisms.files import inside, new_run_dir
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
from workbench.sweep.table import DENSE_CAVEAT, OBJECTIVE_LABEL, SweepRecord, SweepRow
from workbench.tracking.run_log import DESCRIPTION_TAG, RUN_NAME_TAG, tracker_for
from workbench.tracking.tracker import Tracker
from workbench.tune.budget import Budget, next_trial_s, second_look_growth
from workbench.tune.record import (
    TUNE_PLOT,
    Outcome,
    SensitivityJson,
    TuneRecord,
    print_tune,
    render_tune,
    write_tune,
)
from workbench.tune.schedule import PASS, next_kept
from workbench.tune.trials import trial_config

__all__ = ["Search", "check_tune", "pick_trial", "run_tune"]

METHOD = ("token KL(baseline || baseline with only this block's Linear weights rounded to "
          "the candidate's grid) on the held-out passages")
PROTECTION = ("each trial was judged on the search half of every suite's items; the chosen "
              "trial's final decision is judged on the other half, whose outcomes no search "
              "step read (docs/tune.md). The load test and memory figures are not item by "
              "item: the confirmation reads the chosen trial's own load sessions.")


@dataclass
class Search:
    """The trials so far: each k's row, in the order they ran, and why the search ended."""

    rows: dict[int, SweepRow] = field(default_factory=dict)
    stopped: str = ""
    failed: bool = False

    def decisions(self) -> dict[int, str]:
        return {k: r.decision_here or r.status for k, r in self.rows.items()}

    def chosen(self) -> int | None:
        """The smallest k promoted on the search half (the schedule's answer when settled,
        the best found so far when the budget ended it)."""
        passed = [k for k, r in self.rows.items() if r.decision_here == PASS]
        return min(passed) if passed else None


def check_tune(p: Plan, budget: Budget) -> None:
    """Tune's own checks on top of evaluate's (plan()): exit 2 before anything is written."""
    problems = sensitivity_problems(p.cfg, p.candidate_name)
    if budget.max_trials < 1:
        problems.append(f"--max-trials: {budget.max_trials} (at least 1)")
    if not budget.max_hours > 0:
        problems.append(f"--max-hours: {budget.max_hours} (more than 0)")
    if p.cfg.endpoints.baseline is not None or p.cfg.endpoints.candidate is not None:
        problems.append(f"{p.cfg.source}: endpoints: tune builds and serves its trials "
                        "itself; run it without endpoints")
    if problems:
        raise InputError(problems[0], problems)


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
        sens = _sensitivity(base, tune_dir, console)
        search = _search(base, sens, tune_dir, console, tracker, budget, started)
        trials = _table(base, search, tune_dir, started, budget.objective)
        chosen = None if search.failed else pick_trial(search, trials)
        confirmation = None if chosen is None else _trial(
            base, sens, chosen, tune_dir, console, tracker, budget.objective, "confirm")
        record = _record(base, sens, search, trials, (chosen, confirmation), budget,
                         tune_dir, started, tracker)
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


def _trial(p: Plan, sens: Sensitivity, kept: int, tune_dir: Path, console: Console,
           tracker: Tracker, objective: Objective, part: str = "search") -> SweepRow:
    """One trial through evaluate's stages, judged on one half of the items."""
    cfg, name = trial_config(p.cfg, p.candidate_name, sens, kept)
    trial = p.variant(cfg, name, ItemSplit("search" if part == "search" else "confirm",
                                           p.cfg.seed))
    blocks = sens.ranked()[:kept]
    kept_text = f"blocks {blocks} kept in 16-bit" if blocks else "the recipe as stated"
    console.rule(f"{'trial' if part == 'search' else 'confirmation'} {name}: {kept_text}, "
                 f"judged on the {part} half")
    folder = inside(tune_dir, name if part == "search" else f"confirm-{name}")
    return evaluate_row(trial, folder, console, False, tracker, objective,
                        p.policy.sweep.quality)


def _search(p: Plan, sens: Sensitivity, tune_dir: Path, console: Console,
            tracker: Tracker, budget: Budget, started: float) -> Search:
    """k = 0, doubling, bisection (schedule.py) until settled or out of budget; a trial
    whose measurement failed ends it (the ones before it are kept)."""
    search, growth = Search(), second_look_growth(p)
    suite_runs = sum(len(list(s.spec.runs())) for s in p.suites)
    while True:
        k = next_kept(search.decisions(), len(sens.blocks))
        spent = time.perf_counter() - started
        price = next_trial_s(search.rows.values(), growth, suite_runs)
        if k is None:
            search.stopped = _settled_text(search)
        elif len(search.rows) >= budget.max_trials:
            search.stopped = f"the budget of {budget.max_trials} trial(s) was spent"
        elif spent + price > budget.max_hours * 3600:
            search.stopped = (f"the budget of {budget.max_hours:g} h could be passed by the "
                              f"next trial ({spent:.0f} s spent; the next may take up to "
                              f"{price:.0f} s if it looks twice, docs/tune.md 'Budget')")
        else:
            row = _trial(p, sens, k, tune_dir, console, tracker, budget.objective)
            search.rows[k] = row
            if row.status != "decided":
                search.failed = row.status == "failed"
                search.stopped = f"trial {row.candidate} {row.status}: {row.reason}"
            else:
                continue
        return search


def _settled_text(search: Search) -> str:
    chosen = search.chosen()
    if chosen is None:
        return "every block was kept and no trial was promoted"
    below = [k for k in search.rows if k < chosen]
    return (f"settled: keeping {chosen} block(s) is the fewest promoted"
            + (f" ({max(below)} was not)" if below else " (the recipe as stated)"))


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


def pick_trial(search: Search, trials: SweepRecord) -> int | None:
    """The trial to confirm: the table's recommendation, the best promoted trial on the
    objective (None when none was promoted)."""
    best = trials.recommendation.candidate
    return next((k for k, r in search.rows.items() if r.candidate == best), None)


def _record(p: Plan, sens: Sensitivity, search: Search, trials: SweepRecord,
            picked: tuple[int | None, SweepRow | None], budget: Budget, tune_dir: Path,
            started: float, tracker: Tracker) -> TuneRecord:
    ranked = sorted(sens.blocks, key=lambda b: (-b.kl_mean, b.block))
    return TuneRecord(
        model=p.cfg.model.name, candidate=p.candidate_name, device=p.device,
        policy=trials.policy,
        sensitivity=SensitivityJson(
            method=METHOD, bits=sens.bits, group_size=sens.group_size,
            ranked=[{"block": b.block, "kl_mean": b.kl_mean,
                     "top1_agreement": b.top1_agreement} for b in ranked],
            passages=sens.passages, tokens=sens.tokens, seconds=sens.seconds,
            cache_hit=sens.cache_hit),
        kept={r.candidate: sens.ranked()[:k] for k, r in search.rows.items()},
        trials=trials, stopped=search.stopped, max_trials=budget.max_trials,
        max_hours=budget.max_hours, protection=PROTECTION, confirmation=picked[1],
        outcome=_outcome(p, sens, search, picked, tune_dir, budget.objective),
        tune_dir=str(tune_dir),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        wall_time_s=round(time.perf_counter() - started, 1),
        mlflow=MlflowSection(tracking_uri=tracker.uri, run_id=tracker.run_id,
                             experiment_id=tracker.experiment_id, ui=tracker.ui_link()))


def _outcome(p: Plan, sens: Sensitivity, search: Search,
             picked: tuple[int | None, SweepRow | None], tune_dir: Path,
             objective: Objective) -> Outcome:
    if search.failed:
        return Outcome("failed", search.stopped)
    chosen, confirmation = picked
    if chosen is None or confirmation is None:
        return _none_promoted(search)
    trial = search.rows[chosen].candidate
    kept = sens.ranked()[:chosen]
    if confirmation.decision_here != PASS:
        gates, why = _in_the_way(confirmation)
        return Outcome("not_confirmed", f"`{trial}` was promoted on the search half but is "
                       f"{confirmation.decision} on the held-out half ({why}): "
                       "the search's pass did not hold on items it never judged",
                       trial, kept, confirmation_dir=confirmation.run_dir,
                       still_failing=gates)
    recipe, entry = _hand_back(p, trial, Path(confirmation.run_dir), tune_dir)
    return Outcome("confirmed", f"`{trial}` ({chosen} blocks kept): the best "
                   f"{OBJECTIVE_LABEL[objective]} among the trials "
                   f"the policy promoted, confirmed on the held-out half; weights "
                   f"{(confirmation.weights_bytes or 0) / 2**20:.0f} MiB "
                   f"({confirmation.compression_ratio or 0:.2f}x smaller than the baseline)"
                   + (DENSE_CAVEAT if confirmation.served_dense else ""),
                   trial, kept, str(recipe), str(entry), confirmation.run_dir)


def _none_promoted(search: Search) -> Outcome:
    """No trial promoted: the best one (fewest failing gates, then the most kept) and the
    gates it still fails."""
    decided = [(k, r) for k, r in search.rows.items() if r.status == "decided"]
    if not decided:
        return Outcome("none_promoted", f"no trial was judged ({search.stopped})")
    # a trial stopped early left gates unjudged: it is the best only where every trial was
    k, best = min(decided, key=lambda kr: (bool(kr[1].stopped_by), len(kr[1].failing_gates),
                                           -kr[0]))
    gates, why = _in_the_way(best)
    return Outcome("none_promoted", f"no trial was promoted ({search.stopped}); the best, "
                   f"`{best.candidate}` ({k} kept), is {best.decision}: {why}",
                   best.candidate, still_failing=gates)


def _in_the_way(row: SweepRow) -> tuple[list[str], str]:
    """The gates between a trial and promotion, and how to say so: those it fails, or, when
    it fails none, those its items left undecided. A reject's undecided gates are counted,
    not listed as failures: its sample never had to settle them."""
    if row.failing_gates:
        open_ = (f"; {len(row.inconclusive_gates)} more not settled by its items"
                 if row.inconclusive_gates else "")
        stopped = (f"; stopped early, not measured: {', '.join(row.not_measured)}"
                   if row.stopped_by else "")
        return row.failing_gates, f"fails {', '.join(row.failing_gates)}{open_}{stopped}"
    return row.inconclusive_gates, f"not shown within margin: {', '.join(row.inconclusive_gates)}"


_PYTHON_TAG = re.compile(r"!!python/object/apply:[\w.]+\s*\[\s*(\w+)\s*\]")


def _hand_back(p: Plan, trial: str, run_dir: Path, tune_dir: Path) -> tuple[Path, Path]:
    """The chosen trial's llm-compressor recipe, as the quantiser saved it beside the
    weights, and a `candidates:` entry naming it. The saved recipe spells enum values as
    Python object tags, which YAML readers refuse; they become their plain values."""
    built = json.loads((run_dir / "quantize.json").read_text())  # the quantise stage's
    text = _PYTHON_TAG.sub(r"\1", (Path(built["path"]) / "recipe.yaml").read_text())
    yaml.safe_load(text)  # a recipe that does not read back is not handed back
    recipe = inside(tune_dir, f"{trial}.recipe.yaml")  # a name from the config, not a path
    recipe.write_text(f"# workbench tune: the recipe of {trial} (artifact {built['key'][:12]})"
                      f", as llm-compressor saved it\n{text}")
    cand = p.cfg.candidates[p.candidate_name]
    entry = {"candidates": {f"{trial}": {
        "recipe_file": str(recipe.resolve()),
        **({"kv_cache_dtype": cand.kv_cache_dtype} if cand.kv_cache_dtype != "auto" else {}),
        **({"engine_args": cand.engine_args} if cand.engine_args else {})}}}
    candidate = tune_dir / "candidate.yaml"
    candidate.write_text(yaml.safe_dump(entry, sort_keys=False))
    return recipe, candidate


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
