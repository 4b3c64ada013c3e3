"""The load sweep as a picture: latency percentiles against throughput, one line per model.

matplotlib comes with MLflow; the PNG lands in the run folder, which is logged to MLflow as
artifacts (the UI shows it inline) and linked from decision.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")  # files only: no display on CI runners or servers
import matplotlib.pyplot as plt  # noqa: E402 (the backend must be chosen first)

from .loadtest import LoadResult  # noqa: E402

if TYPE_CHECKING:
    from .sweep import SweepRecord

__all__ = ["LATENCY_PLOT", "plot_latency_vs_throughput", "plot_pareto"]

LATENCY_PLOT = "load-latency-vs-throughput.png"
PANELS = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("e2el_ms", "end-to-end (ms)"))
STYLES = {"p50": "-", "p99": "--"}
COLOURS = {"baseline": "#1f77b4", "candidate": "#d62728"}


def plot_latency_vs_throughput(loads: dict[str, LoadResult], title: str, path: Path) -> Path:
    """One panel per latency: p50 (solid) and p99 (dashed) against output tokens/s, each
    point labelled with its level; baseline and candidate on the same axes."""
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 4.2),
                             constrained_layout=True)
    for ax, (metric, ylabel) in zip(axes, PANELS, strict=True):
        for who, load in loads.items():
            x = [lv.output_throughput for lv in load.levels]
            for stat, style in STYLES.items():
                y = [getattr(lv, metric)[stat] for lv in load.levels]
                ax.plot(x, y, style, marker="o", color=COLOURS.get(who), label=f"{who} {stat}")
            for lv in load.levels:
                ax.annotate(lv.key, (lv.output_throughput, getattr(lv, metric)["p99"]),
                            textcoords="offset points", xytext=(4, 4), fontsize=7)
        slo = next(iter(loads.values())).profile.get("slo") if loads else None
        target = {"ttft_ms": "ttft_p99_ms", "tpot_ms": "tpot_p99_ms"}.get(metric)
        if slo and target:
            ax.axhline(slo[target], color="grey", linewidth=0.8, linestyle=":",
                       label="SLO (p99)")
        ax.set_xlabel("output tokens/s (client-side)")
        ax.set_ylabel(ylabel)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


DECISION_STYLE = {"promote": ("o", "#2ca02c"), "inconclusive": ("s", "#ff7f0e"),
                  "reject": ("x", "#d62728")}


def plot_pareto(record: SweepRecord, out: Path) -> Path | None:
    """Quality retained against the objective, a point per judged candidate (rejected
    ones as crosses: shown, never on the front), the front joined by a line, the
    baseline's efficiency as a vertical reference. None when nothing was judged."""
    from .sweep import HIGHER_IS_BETTER, OBJECTIVE_LABEL, QUALITY_LABEL

    judged = [r for r in record.rows if r.quality is not None and r.efficiency is not None]
    if not judged:
        return None
    scale = 2**20 if record.objective == "weights" else 1
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in judged:
        marker, colour = DECISION_STYLE[r.decision or "reject"]
        ax.scatter(r.efficiency / scale, r.quality, marker=marker, color=colour, s=60, zorder=3)
        ax.annotate(r.candidate, (r.efficiency / scale, r.quality), textcoords="offset points",
                    xytext=(6, 4), fontsize=8)
    front = sorted((r for r in judged if r.on_front), key=lambda r: r.efficiency or 0.0)
    if len(front) > 1:
        ax.plot([r.efficiency / scale for r in front], [r.quality for r in front], "-",
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
    ax.set_title(f"{record.model}: candidates on {record.device}", fontsize=10)
    handles = [plt.Line2D([], [], marker=m, color=c, linestyle="", label=d)
               for d, (m, c) in DECISION_STYLE.items()]
    ax.legend(handles=handles + ax.get_legend_handles_labels()[0], fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
