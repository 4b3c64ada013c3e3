"""The load sweep as a picture: latency percentiles against throughput, one line per model,
and the capacity at the SLO when the profile searched for it.

matplotlib comes with MLflow; the PNG lands in the run folder, which is logged to MLflow as
artifacts (the UI shows it inline) and linked from decision.md.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from workbench.gate.capacity import capacity_bracket
from workbench.loadtest.results import LoadResult
from workbench.mechanisms.plotting import pyplot

__all__ = ["COLOURS", "LATENCY_PLOT", "PANELS", "STYLES", "TELEMETRY_PLOT",
           "plot_latency_vs_throughput", "plot_telemetry"]

LATENCY_PLOT = "load-latency-vs-throughput.png"
TELEMETRY_PLOT = "load-engine-telemetry.png"
PANELS = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("e2el_ms", "end-to-end (ms)"))
STYLES = {"p50": "-", "p99": "--"}
COLOURS = {"baseline": "#1f77b4", "candidate": "#d62728"}


def plot_latency_vs_throughput(loads: dict[str, LoadResult], title: str, path: Path) -> Path:
    """One panel per latency: p50 (solid) and p99 (dashed) against output tokens/s, each
    point labelled with its level; baseline and candidate on the same axes."""
    plt = pyplot()
    searched = any(r.capacity for load in loads.values() for r in load.all_rounds())
    panels = len(PANELS) + searched
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4.2), constrained_layout=True)
    if searched:
        _capacity_panel(axes[-1], loads)
    for ax, (metric, ylabel) in zip(axes, PANELS, strict=False):
        ringed = False  # one legend entry for the rings, whichever model has them
        for who, load in loads.items():
            x = [lv.output_throughput for lv in load.levels]
            for stat, style in STYLES.items():
                y = [getattr(lv, metric)[stat] for lv in load.levels]
                ax.plot(x, y, style, marker="o", color=COLOURS.get(who), label=f"{who} {stat}")
            for lv in load.levels:
                ax.annotate(lv.key, (lv.output_throughput, getattr(lv, metric)["p99"]),
                            textcoords="offset points", xytext=(4, 4), fontsize=7)
                if lv.saturation.get("over_saturated"):  # saturation.py's test
                    ax.plot(lv.output_throughput, getattr(lv, metric)["p99"], "o",
                            markersize=13, markerfacecolor="none", markeredgecolor="black",
                            label=None if ringed else "over-saturated")
                    ringed = True
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




def _capacity_panel(ax: Any, loads: dict[str, LoadResult]) -> None:
    """The capacity at the SLO: per model, every level each session's search tried (filled:
    held, hollow: did not), and the model's bracket over its sessions as a bar, the
    interval the capacity gate reads (gate/capacity.py)."""
    knob = "arrivals/s"
    for row, (who, load) in enumerate(loads.items()):
        colour = COLOURS.get(who)
        sessions = [r.capacity for r in load.all_rounds() if r.capacity]
        for k, found in enumerate(sessions):
            knob = "requests in flight" if found["knob"] == "concurrency" else knob
            y = row + 0.12 * (k - (len(sessions) - 1) / 2)
            for t in found["tried"]:
                ax.plot(t["level"], y, "o", color=colour,
                        markerfacecolor=colour if t["held"] else "none")
        bracket = capacity_bracket(load)
        if bracket is not None:
            low, high, _ = bracket
            top = high if math.isfinite(high) else max(
                (t["level"] for c in sessions for t in c["tried"]), default=low)
            ax.plot([low, top], [row - 0.3, row - 0.3], "-", color=colour, linewidth=4,
                    solid_capstyle="butt")
            ax.annotate(f"[{low:g}, {high:g})" if math.isfinite(high) else f"≥ {low:g}",
                        (low, row - 0.3), textcoords="offset points", xytext=(0, -11),
                        fontsize=7)
    ax.set_yticks(range(len(loads)), list(loads))
    ax.set_ylim(len(loads) - 0.5, -0.7)
    ax.set_xlabel(f"{knob} (filled: held the SLO)")
    ax.set_title("capacity at the SLO", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)


def plot_telemetry(loads: dict[str, LoadResult], title: str, path: Path) -> Path | None:
    """The engine's state through the load test, one row per model: requests running and
    waiting (left axis), KV-cache usage (right axis), each level a band labelled with its
    key, a level that outran the engine shaded red. None when no level was scraped."""
    rows = [(who, load) for who, load in loads.items()
            if any(lv.telemetry.get("samples") for lv in load.levels)]
    if not rows:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(len(rows), 1, figsize=(12, 2.6 * len(rows)), squeeze=False,
                             constrained_layout=True)
    for ax, (who, load) in zip(axes[:, 0], rows, strict=True):
        _telemetry_row(ax, who, load)
    axes[-1, 0].set_xlabel("seconds into the load test (levels back to back)")
    fig.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _telemetry_row(ax: Any, who: str, load: LoadResult) -> None:
    kv = ax.twinx()
    offset = 0.0
    for lv in load.levels:
        samples = lv.telemetry.get("samples", [])
        if not samples:
            continue
        t = [offset + s["t_s"] - samples[0]["t_s"] for s in samples]
        ax.plot(t, [s["running"] for s in samples], "-", color=COLOURS.get(who), label="running")
        ax.plot(t, [s["waiting"] for s in samples], "--", color="orange", label="waiting")
        kv.plot(t, [100 * s["kv_cache_usage"] for s in samples], ":", color="grey",
                label="KV cache %")
        over = bool(lv.saturation.get("over_saturated"))
        ax.axvspan(t[0], t[-1], color="#f4cccc" if over else "#eeeeee", alpha=0.5,
                   linewidth=0, label="over-saturated level" if over else None)
        ax.annotate(lv.key, (t[0], 1), xycoords=("data", "axes fraction"),
                    textcoords="offset points", xytext=(2, -10), fontsize=7)
        offset = t[-1] + 1.0  # a second's gap between levels
    (h1, l1), (h2, l2) = ax.get_legend_handles_labels(), kv.get_legend_handles_labels()
    unique = dict(zip(l1 + l2, h1 + h2, strict=True))  # one entry per line kind, not level
    ax.legend(unique.values(), unique.keys(), fontsize=7, loc="upper left",
              bbox_to_anchor=(1.06, 1.0))
    ax.set_ylabel(f"{who}: requests")
    kv.set_ylabel("KV cache %")
    kv.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
