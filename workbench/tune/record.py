"""A tune written out: tune.json (the contract, with a published schema), tune.md and the
trial plot. The trials are a sweep's table (sweep/table.py): a row per trial read from its
decision record, quality retained against weights bytes, the front of the trials not
rejected; tune adds the blocks each kept, the sensitivity ranking, why the search stopped,
the confirmation on the held-out half and what it hands back.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.markup import escape
from typing_extensions import NotRequired, TypedDict

from workbench.mechanisms.errors import EXIT_INFRA, EXIT_PROMOTE, EXIT_REJECT
from workbench.mechanisms.files import write_json
from workbench.mechanisms.json_schema import published_schema
from workbench.record.sections import MlflowSection
from workbench.sweep.report import plot_pareto, print_table, render_sweep
from workbench.sweep.table import SweepRecord, SweepRow

__all__ = ["SCHEMA_FILE", "TUNE_PLOT", "TUNE_SCHEMA_VERSION", "LeftOutJson", "Outcome",
           "PointJson", "SensitivityJson", "SpaceJson", "TuneRecord",
           "print_tune", "render_tune", "tune_schema", "write_tune"]

# 2: the registry entry names the champion before it; 3: a trial stopped early says by
# which gates and what it did not measure (its row's stopped_by, not_measured); 4: a trial
# served dense says so and gives its decision on what the device can judge (judged_here);
# 5: a tune over a space of recipes (`space`: its axes, the points in the order tried, those
# left out and why; the outcome's recipe in words, `label`); no sensitivity where no point
# keeps a block
TUNE_SCHEMA_VERSION = 5
SCHEMA_FILE = Path(__file__).with_name(f"tune-v{TUNE_SCHEMA_VERSION}.schema.json")
TUNE_PLOT = "tune.png"


class BlockJson(TypedDict):
    block: int
    kl_mean: float
    top1_agreement: float


class PointJson(TypedDict):
    name: str
    label: str  # the recipe in words
    values: dict  # method, symmetric, group_size, overrides, kept
    weight_bytes: int  # estimated from the model's config.json: the order tried
    # the build's held-out perplexity over the baseline's, where the walk built the point to
    # rank it among points of its size (docs/tune.md, "The order")
    perplexity_ratio: NotRequired[float]


class LeftOutJson(TypedDict):
    name: str
    why: str


class SpaceJson(TypedDict):
    axes: dict  # the config's tune.space, every default filled in
    points: list[PointJson]  # cheapest first: the order the search tries them
    left_out: list[LeftOutJson]  # points the model's widths or this device cannot take


class SensitivityJson(TypedDict):
    method: str  # how each block was scored, in words
    bits: int
    group_size: int
    ranked: list[BlockJson]  # every decoder block, the most sensitive first
    passages: int
    tokens: int
    seconds: float  # the worker's time when it was measured
    cache_hit: bool


@dataclass
class Outcome:
    """What the tune hands back."""

    status: Literal["confirmed", "not_confirmed", "none_promoted", "failed"]
    reason: str  # in words: the recipe and why, or why there is none
    trial: str | None = None  # the chosen trial (the cheapest the search promoted)
    kept: list[int] = field(default_factory=list)  # its blocks kept in 16-bit
    recipe_file: str | None = None  # its llm-compressor recipe, usable as `recipe_file:`
    candidate_file: str | None = None  # a `candidates:` entry that names it
    confirmation_dir: str | None = None  # its decision on the held-out half
    # none passed: the gates the best trial fails (those left open when it fails none)
    still_failing: list[str] = field(default_factory=list)
    label: str | None = None  # the trial's recipe in words


@dataclass
class TuneRecord:
    model: str
    candidate: str
    device: str
    policy: str
    sensitivity: SensitivityJson | None  # None: no trial keeps a block in 16-bit
    kept: dict[str, list[int]]  # trial -> the blocks it keeps in 16-bit
    trials: SweepRecord  # each trial judged on the search half of the items
    stopped: str  # why the search stopped, in words
    max_trials: int
    max_hours: float
    protection: str  # how the final decision was kept from the selection, in words
    confirmation: SweepRow | None  # the chosen trial judged on the held-out half
    outcome: Outcome
    tune_dir: str
    created_at: str
    wall_time_s: float = 0.0
    plots: dict[str, str] = field(default_factory=dict)
    space: SpaceJson | None = None  # a search over recipes (the config's tune.space)
    mlflow: MlflowSection = field(default_factory=lambda: MlflowSection())
    schema_version: int = TUNE_SCHEMA_VERSION

    @property
    def exit_code(self) -> int:
        if self.outcome.status == "failed":
            return EXIT_INFRA
        return EXIT_PROMOTE if self.outcome.status == "confirmed" else EXIT_REJECT

    def to_dict(self) -> dict:
        return {**asdict(self), "exit_code": self.exit_code}


def tune_schema() -> dict:
    return published_schema(TuneRecord, "tune", TUNE_SCHEMA_VERSION, {
        0: "a recipe was promoted by the search and confirmed on held-out items",
        1: "none was promoted within the budget, or the choice was not confirmed",
        3: "a trial's measurement failed (the trials before it are kept)"})


def validate_tune(record: dict) -> None:
    """Raise jsonschema.ValidationError when a tune.json breaks the published schema."""
    import jsonschema

    jsonschema.validate(record, json.loads(SCHEMA_FILE.read_text()))


def write_tune(tune_dir: Path, record: TuneRecord) -> None:
    """tune.json, tune.md and the plot. An interrupted tune leaves each finished trial's
    own decision record; run again, it finds them all in the cache."""
    path = plot_pareto(record.trials, tune_dir / TUNE_PLOT,
                       f"trials of {record.candidate}, judged on the search half")
    if path is not None:
        record.plots = {"quality retained vs weights (trials, search half)": path.name}
    write_json(tune_dir / "tune.json", record.to_dict())
    (tune_dir / "tune.md").write_text(render_tune(record))


def _headline(record: TuneRecord) -> str:
    out = record.outcome
    if out.status == "confirmed":
        what = f"({out.label})" if record.space is not None else (
            f"keeps blocks {out.kept} of `{record.candidate}` in 16-bit;")
        return (f"**Tuned: `{out.trial}`** {what} promoted on the search half and confirmed "
                "on the held-out half.")
    return f"**No tuned recipe** ({out.status.replace('_', ' ')})."


def _sensitivity_lines(record: TuneRecord) -> list[str]:
    sens = record.sensitivity
    if sens is None:
        return []
    ranked = ", ".join(f"{b['block']} ({b['kl_mean']:.3g})" for b in sens["ranked"][:8])
    return [f"Sensitivity ({sens['method']}), most sensitive first, KL in brackets: "
            f"{ranked}{' …' if len(sens['ranked']) > 8 else ''}"
            f"{' (cached)' if sens['cache_hit'] else ''}.", "",
            "Blocks kept per trial: " + "; ".join(
                f"`{t}` {blocks or 'none'}" for t, blocks in record.kept.items()), ""]


def _space_lines(record: TuneRecord) -> list[str]:
    space = record.space
    if space is None:
        return []
    tried = {r.candidate for r in record.trials.rows}
    lines = ["## The space, in the order tried", "",
             "| point | recipe | weights (est.) | held-out perplexity | tried |",
             "|---|---|---|---|---|"]
    lines += [f"| `{pt['name']}` | {pt['label']} | {pt['weight_bytes'] / 2**20:.1f} MiB | "
              + (f"×{pt['perplexity_ratio']:.3f}" if "perplexity_ratio" in pt else "–")
              + f" | {'yes' if pt['name'] in tried else 'no'} |" for pt in space["points"]]
    lines += [""] + [f"Left out: `{lo['name']}`: {lo['why']}." for lo in space["left_out"]]
    return lines + ([""] if space["left_out"] else [])


def render_tune(record: TuneRecord) -> str:
    lines = [f"# Tune of `{record.candidate}` on `{record.model}` ({record.device})", "",
             _headline(record), "", record.outcome.reason, ""]
    if record.outcome.recipe_file:
        lines += [f"Recipe: `{record.outcome.recipe_file}`; as a candidate: "
                  f"`{record.outcome.candidate_file}`.", ""]
    lines += [f"Search: {record.stopped} (budget {record.max_trials} trials, "
              f"{record.max_hours:g} h; wall time {record.wall_time_s:.0f} s).", "",
              f"Selection: {record.protection}", "", *_sensitivity_lines(record),
              *_space_lines(record), "## Trials (judged on the search half)", "",
              render_sweep(record.trials).split("\n", 2)[2]]
    if record.confirmation is not None:
        c = record.confirmation
        lines += ["## Confirmation (the held-out half)", "",
                  f"`{c.candidate}`: **{c.decision}**"
                  + (f"; failing: {', '.join(c.failing_gates)}" if c.failing_gates else "")
                  + (f"; stopped early by {', '.join(c.stopped_by)}" if c.stopped_by else "")
                  + (f"; inconclusive: {', '.join(c.inconclusive_gates)}"
                     if c.inconclusive_gates else "") + f" (record: `{c.run_dir}`).", ""]
    return "\n".join(lines) + "\n"


def print_tune(record: TuneRecord, console: Console) -> None:
    print_table(record.trials, console, f"trials of {record.candidate} (search half)")
    out = record.outcome
    colour = "green" if out.status == "confirmed" else "yellow"
    console.print(f"[bold {colour}]{escape(_headline(record).replace('**', ''))}[/] "
                  f"{escape(out.reason)}")
    if out.recipe_file:
        console.print(f"recipe: {out.recipe_file} · candidate entry: {out.candidate_file}")
    console.print(f"tune record: {Path(record.tune_dir) / 'tune.json'} · MLflow UI: "
                  f"{record.mlflow.get('ui', '')}")


if __name__ == "__main__":
    SCHEMA_FILE.write_text(json.dumps(tune_schema(), indent=2) + "\n")
    print(f"wrote {SCHEMA_FILE}")
