"""The load sweep as a picture: latency percentiles against throughput, one line per model.

matplotlib comes with MLflow; the PNG lands in the run folder, which is logged to MLflow as
artifacts (the UI shows it inline) and linked from decision.md.
"""

from __future__ import annotations

from pathlib import Path

from workbench.loadtest.results import LoadResult
from workbench.mechanisms.plotting import pyplot

__all__ = ["COLOURS", "LATENCY_PLOT", "PANELS", "STYLES", "plot_latency_vs_throughput"]

LATENCY_PLOT = "load-latency-vs-throughput.png"
PANELS = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("e2el_ms", "end-to-end (ms)"))
STYLES = {"p50": "-", "p99": "--"}
COLOURS = {"baseline": "#1f77b4", "candidate": "#d62728"}


def plot_latency_vs_throughput(loads: dict[str, LoadResult], title: str, path: Path) -> Path:
    """One panel per latency: p50 (solid) and p99 (dashed) against output tokens/s, each
    point labelled with its level; baseline and candidate on the same axes."""
    plt = pyplot()
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


