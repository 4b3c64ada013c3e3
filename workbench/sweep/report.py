"""A sweep written out: sweep.json (the contract), sweep.md, the console table, and the
Pareto picture (quality retained against the policy's objective, a point per candidate).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from workbench.mechanisms.files import write_json
from workbench.mechanisms.plotting import pyplot
from workbench.sweep.table import (
    HIGHER_IS_BETTER,
    OBJECTIVE_LABEL,
    QUALITY_LABEL,
    SweepRecord,
    decision_text,
    failing_text,
    show_objective,
)

__all__ = ["DECISION_STYLE", "PARETO_PLOT", "plot_pareto", "print_sweep", "print_table",
           "render_sweep", "write_sweep"]

PARETO_PLOT = "pareto.png"


def write_sweep(sweep_dir: Path, record: SweepRecord) -> None:
    path = plot_pareto(record, sweep_dir / PARETO_PLOT)
    if path is not None:
        record.plots = {"quality retained vs " + record.objective: path.name}
    write_json(sweep_dir / "sweep.json", record.to_dict())
    (sweep_dir / "sweep.md").write_text(render_sweep(record))


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def render_sweep(record: SweepRecord) -> str:
    rec = record.recommendation
    undecided = undecided_headline(record)
    head = (f"**Recommended: `{rec.candidate}`**" + (f" (runner-up `{rec.runner_up}`)"
                                                    if rec.runner_up else "")
            if rec.candidate else "**No candidate recommended**")
    lines = [f"# Sweep of `{record.model}` on {record.device}", "",
             *([policy_headline(record), ""] if record.baseline_misses else []),
             *([undecided, ""] if undecided else []),
             head, "", rec.reason, "",
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
            f"| {r.candidate} | {decision_text(r)} | {failing_text(r)} | "
            f"{r.format}{_cell(f' ({r.recipe})') if r.recipe else ''} | {weights} | "
            f"{_fmt(r.kl_mean, '.4f')} / "
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


def policy_headline(record: SweepRecord) -> str:
    gates = ", ".join(f"`{g}`" for g in record.baseline_misses)
    return (f"**No candidate of this model can pass this policy: {gates} — the baseline "
            "misses them.** The rejections below that name only these gates are the "
            "policy's, not the candidates'.")


def undecided_headline(record: SweepRecord) -> str:
    """When nothing was recommended yet a candidate is only inconclusive: the sizes, not
    the candidates, left it open, and which gates need the most items (docs/gates.md,
    "Inconclusive"). Empty otherwise."""
    undecided = [r for r in record.rows if r.status == "decided"
                 and r.decision == "inconclusive"]
    if record.recommendation.candidate or not undecided:
        return ""
    needs = sorted(((n, r.candidate, g) for r in undecided
                    for g, n in r.items_to_decide.items()), reverse=True)[:3]
    most = "; ".join(f"`{c}` `{g}` about {n} more" for n, c, g in needs)
    names = ", ".join(f"`{r.candidate}`" for r in undecided)
    again = (" even after a second look at every item" if all(r.looks == 2 for r in undecided)
             else "")
    return (f"**Nothing decided for {names}: inconclusive, not rejected{again}.** At these "
            "sizes the intervals straddle the policy's margins"
            + (f" (most items needed: {most})" if most else "")
            + "; more items per suite decide them, looser margins would only hide it.")


def print_sweep(record: SweepRecord, console: Console) -> None:
    print_table(record, console)
    rec = record.recommendation
    verdict = f"recommended: {rec.candidate}" if rec.candidate else "none recommended"
    console.print(f"[bold]{escape(verdict)}[/] — {escape(rec.reason)}")
    console.print(f"sweep record: {Path(record.sweep_dir) / 'sweep.json'} · MLflow UI: "
                  f"{record.mlflow.get('ui', '')}")


def print_table(record: SweepRecord, console: Console, title: str = "sweep") -> None:
    """The headlines and the table, a row per candidate (tune prints its trials so)."""
    if record.baseline_misses:
        console.print(f"[bold red]{escape(policy_headline(record).replace('**', ''))}[/]")
    if undecided := undecided_headline(record):
        console.print(f"[bold yellow]{escape(undecided.replace('**', ''))}[/]")
    table = Table(title=f"{title} of {record.model}: objective {record.objective}")
    for col in ("candidate", "decision", "quality", record.objective, "front", "failing gates"):
        table.add_column(col, overflow="fold")
    for r in record.rows:
        table.add_row(escape(r.candidate), r.decision or r.status,
                      _fmt(r.quality, "+.3f"), show_objective(r.efficiency, record.objective)
                      if r.status == "decided" else "–",
                      "yes" if r.on_front else "",
                      escape(failing_text(r) if r.status == "decided" else r.reason))
    console.print(table)


def _cell(text: str) -> str:
    """Text for a Markdown table cell: a pattern's | would split the row."""
    return text.replace("|", "\\|")


DECISION_STYLE = {"promote": ("o", "#2ca02c"), "inconclusive": ("s", "#ff7f0e"),
                  "reject": ("x", "#d62728")}


def plot_pareto(record: SweepRecord, out: Path, what: str = "candidates") -> Path | None:
    """Quality retained against the objective, a point per judged candidate (rejected
    ones as crosses: shown, never on the front), the front joined by a line, the
    baseline's efficiency as a vertical reference. None when nothing was judged."""


    plt = pyplot()
    judged = [r for r in record.rows if r.quality is not None and r.efficiency is not None]
    if not judged:
        return None
    scale = 2**20 if record.objective == "weights" else 1
    fig, ax = plt.subplots(figsize=(7, 4.5))
    points = {r.candidate: (float(r.efficiency or 0.0) / scale, float(r.quality or 0.0))
              for r in judged}
    for r in judged:
        marker, colour = DECISION_STYLE[r.decision or "reject"]
        ax.scatter(*points[r.candidate], marker=marker, color=colour, s=60, zorder=3)
        # a pattern's $ would start matplotlib's math text
        ax.annotate((f"{r.candidate} ({r.recipe})" if r.recipe else r.candidate)
                    .replace("$", r"\$"),
                    points[r.candidate], textcoords="offset points",
                    xytext=(6, 4), fontsize=8)
    front = sorted(points[r.candidate] for r in judged if r.on_front)
    if len(front) > 1:
        ax.plot([x for x, _ in front], [y for _, y in front], "-",
                color="#2ca02c", alpha=0.6, label="Pareto front (not rejected)")
    baseline = record.baseline.get(record.objective)
    if baseline is not None:
        ax.axvline(baseline / scale, color="grey", linestyle=":", label="baseline")
    # the baseline's own quality: no change (delta 0), or full agreement with itself
    ax.axhline(1.0 if record.quality == "top1_agreement" else 0.0, color="grey",
               linewidth=0.5)
    better = "higher" if record.objective in HIGHER_IS_BETTER else "lower"
    ax.set_xlabel(f"{OBJECTIVE_LABEL[record.objective]} ({better} is better)")
    ax.set_ylabel(f"quality retained:\n{QUALITY_LABEL[record.quality]}", fontsize=9)
    ax.set_title(f"{record.model}: {what} on {record.device}", fontsize=10)
    handles = [plt.Line2D([], [], marker=m, color=c, linestyle="", label=d)
               for d, (m, c) in DECISION_STYLE.items()]
    ax.legend(handles=handles + ax.get_legend_handles_labels()[0], fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
