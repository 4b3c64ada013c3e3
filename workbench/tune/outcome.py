"""What a tune hands back: the search's trials, the one it confirms, and the outcome in
words (confirmed, not confirmed on the held-out half, none promoted, or failed), with the
chosen trial's llm-compressor recipe and a `candidates:` entry that names it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from workbench.config.gate_policy import Objective
from workbench.mechanisms.files import inside
from workbench.plan.plan import Plan
from workbench.sweep.table import DENSE_CAVEAT, OBJECTIVE_LABEL, SweepRecord, SweepRow
from workbench.tune.record import Outcome
from workbench.tune.schedule import PASS
from workbench.tune.trials import TrialSpec

__all__ = ["Search", "outcome", "pick_trial"]


@dataclass
class Search:
    """The trials so far, keyed by their place in the search's order (the number of blocks
    kept, or the point's rank in the space), each with its spec, and why the search ended."""

    rows: dict[int, SweepRow] = field(default_factory=dict)
    specs: dict[int, TrialSpec] = field(default_factory=dict)
    stopped: str = ""
    failed: bool = False
    order: list[str] = field(default_factory=list)  # a walk's points as it ordered them

    def decisions(self) -> dict[int, str]:
        return {k: r.decision_here or r.status for k, r in self.rows.items()}

    def chosen(self) -> int | None:
        """The first promoted in the search's order: the fewest blocks kept, or the
        cheapest point of the space."""
        passed = [k for k, r in self.rows.items() if r.decision_here == PASS]
        return min(passed) if passed else None

    def kept(self, key: int) -> list[int]:
        spec = self.specs.get(key)
        return list(spec.kept) if spec else []

    def label(self, key: int) -> str:
        spec = self.specs.get(key)
        return spec.label if spec else f"{key} kept"


def pick_trial(search: Search, trials: SweepRecord) -> int | None:
    """The trial to confirm: the table's recommendation, the best promoted trial on the
    objective; where the objective could not rank the promoted trials (no price for cost,
    no SLO level for throughput), the first promoted in the search's order (None when none
    was promoted)."""
    best = trials.recommendation.candidate
    found = next((k for k, r in search.rows.items() if r.candidate == best), None)
    return found if found is not None else search.chosen()


def outcome(p: Plan, search: Search, picked: tuple[int | None, SweepRow | None],
            tune_dir: Path, objective: Objective) -> Outcome:
    if search.failed:
        return Outcome("failed", search.stopped)
    chosen, confirmation = picked
    if chosen is None or confirmation is None:
        return none_promoted(search)
    trial, label = search.rows[chosen].candidate, search.label(chosen)
    if confirmation.decision_here != PASS:
        gates, why = in_the_way(confirmation)
        return Outcome("not_confirmed", f"`{trial}` was promoted on the search half but is "
                       f"{confirmation.decision} on the held-out half ({why}): "
                       "the search's pass did not hold on items it never judged",
                       trial, search.kept(chosen), confirmation_dir=confirmation.run_dir,
                       still_failing=gates, label=label)
    recipe, entry = hand_back(p, trial, Path(confirmation.run_dir), tune_dir)
    return Outcome("confirmed", f"`{trial}` ({label}): the best "
                   f"{OBJECTIVE_LABEL[objective]} among the trials "
                   f"the policy promoted, confirmed on the held-out half; weights "
                   f"{(confirmation.weights_bytes or 0) / 2**20:.0f} MiB "
                   f"({confirmation.compression_ratio or 0:.2f}x smaller than the baseline)"
                   + (DENSE_CAVEAT if confirmation.served_dense else ""),
                   trial, search.kept(chosen), str(recipe), str(entry),
                   confirmation.run_dir, label=label)


def none_promoted(search: Search) -> Outcome:
    """No trial promoted: the best one (fewest failing gates, then the latest in the
    search's order: the most kept, or the dearest point) and the gates it still fails."""
    decided = [(k, r) for k, r in search.rows.items() if r.status == "decided"]
    if not decided:
        return Outcome("none_promoted", f"no trial was judged ({search.stopped})")
    # a trial stopped early left gates unjudged: it is the best only where every trial was
    k, best = min(decided, key=lambda kr: (bool(kr[1].stopped_by), len(kr[1].failing_gates),
                                           -kr[0]))
    gates, why = in_the_way(best)
    return Outcome("none_promoted", f"no trial was promoted ({search.stopped}); the best, "
                   f"`{best.candidate}` ({search.label(k)}), is {best.decision}: {why}",
                   best.candidate, still_failing=gates, label=search.label(k))


def in_the_way(row: SweepRow) -> tuple[list[str], str]:
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


def hand_back(p: Plan, trial: str, run_dir: Path, tune_dir: Path) -> tuple[Path, Path]:
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
