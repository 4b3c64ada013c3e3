"""The engine's own view of a load level, from its Prometheus `/metrics`.

Parsing is prometheus_client's (it ships with vLLM in the engine environment). Written here:
the difference of two scrapes (what happened during one load level) and quantiles from a
histogram's cumulative buckets, interpolated linearly inside a bucket as Prometheus's
`histogram_quantile` does, so the figures match what a Grafana panel on the same engine
would show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from typing_extensions import TypedDict

__all__ = ["HISTOGRAMS", "Scrape", "histogram_quantile", "parse_scrape", "server_side_level"]

# server-side latency histograms (seconds) -> the workbench's metric names (milliseconds)
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": "ttft_ms",
    "vllm:inter_token_latency_seconds": "itl_ms",
    "vllm:request_time_per_output_token_seconds": "tpot_ms",
    "vllm:e2e_request_latency_seconds": "e2el_ms",
    "vllm:request_queue_time_seconds": "queue_ms",
}
COUNTERS = ("vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens",
            "vllm:request_success")
PERCENTILES = (50, 95, 99)


@dataclass(frozen=True)
class Scrape:
    """One /metrics scrape: histogram buckets (upper bound -> cumulative count), counts and
    sums, counters and gauges; summed over label sets other than the bucket bound."""

    buckets: dict[str, dict[float, float]]
    counts: dict[str, float]
    sums: dict[str, float]
    counters: dict[str, float]
    gauges: dict[str, float]


def parse_scrape(text: str) -> Scrape:
    buckets: dict[str, dict[float, float]] = {}
    counts: dict[str, float] = {}
    sums: dict[str, float] = {}
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if family.type == "histogram" and sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                per = buckets.setdefault(family.name, {})
                per[bound] = per.get(bound, 0.0) + sample.value
            elif family.type == "histogram" and sample.name.endswith("_count"):
                counts[family.name] = counts.get(family.name, 0.0) + sample.value
            elif family.type == "histogram" and sample.name.endswith("_sum"):
                sums[family.name] = sums.get(family.name, 0.0) + sample.value
            elif family.type == "counter" and sample.name.endswith("_total"):
                counters[family.name] = counters.get(family.name, 0.0) + sample.value
            elif family.type == "gauge":
                gauges[family.name] = max(gauges.get(family.name, 0.0), sample.value)
    return Scrape(buckets, counts, sums, counters, gauges)


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """The q-quantile (0..1) of a cumulative histogram; nan when it holds nothing.

    Linear inside the bucket that holds the rank; a rank in the +Inf bucket answers the
    largest finite bound (Prometheus does the same: the histogram knows no more)."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return math.nan
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            span = count - lower_count
            share = (rank - lower_count) / span if span > 0 else 1.0
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, count
    return lower_bound


def _delta(before: dict[float, float], after: dict[float, float]) -> dict[float, float]:
    return {b: after[b] - before.get(b, 0.0) for b in after}


class ServerLevel(TypedDict, total=False):
    """The engine's own view of one load level."""

    latency: dict[str, dict[str, float]]  # ttft_ms / tpot_ms / ... -> p50, p99, count, mean
    counters: dict[str, float]  # counter -> its increase over the level
    boundary: str  # where it was measured (loadtest.SERVER_BOUNDARY)


def server_side_level(before: Scrape, after: Scrape) -> ServerLevel:
    """Percentiles (ms) of each latency histogram over what happened between two scrapes,
    with request counts, and the counters' increases."""
    latency: dict[str, dict[str, float]] = {}
    for name, label in HISTOGRAMS.items():
        if name not in after.buckets:
            continue
        delta = _delta(before.buckets.get(name, {}), after.buckets[name])
        stats = {f"p{p}": round(1000 * histogram_quantile(p / 100, delta), 3)
                 for p in PERCENTILES}
        count = after.counts.get(name, 0.0) - before.counts.get(name, 0.0)
        total = after.sums.get(name, 0.0) - before.sums.get(name, 0.0)
        stats["count"] = count
        # exact, unlike the percentiles: the histogram keeps the sum of what it observed
        stats["mean"] = round(1000 * total / count, 3) if count else math.nan
        latency[label] = stats
    counters = {name.removeprefix("vllm:"): after.counters.get(name, 0.0)
                - before.counters.get(name, 0.0) for name in COUNTERS if name in after.counters}
    return {"latency": latency, "counters": counters}
