"""What a load test measured, typed: each level's client-side percentiles (from `vllm bench
serve`'s per-request results), the engine's own view of the same requests, their
agreement, the SLO figures and the cost at a level; the whole run as a LoadResult.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from typing_extensions import TypedDict

from workbench.config.run_config import SLO, LoadProfile
from workbench.loadtest.capacity import Capacity
from workbench.loadtest.level import (
    Agreement,
    BucketLatency,
    LevelResult,
    MeanAgreement,
    SLOFigures,
)
from workbench.loadtest.workload import CHUNK_TOKENS, Request

__all__ = ["AGREEMENT_FLOOR_MS", "AGREEMENT_TOLERANCE", "BOUNDARY", "PERCENTILES",
           "PROMPT_BUCKETS", "SERVER_BOUNDARY", "SKIPPED", "Agreement", "GeneratorCeiling",
           "LevelResult", "LoadResult", "MeanAgreement", "SLOFigures", "Spread", "Workload",
           "agreement", "by_prompt_length", "cost_figures", "level_label", "parse_level",
           "per_request_ms", "slo_figures", "workload_summary"]

PERCENTILES = (50, 95, 99)


BOUNDARY = "client-side: HTTP streaming, measured by vllm bench serve"


SERVER_BOUNDARY = ("server-side: the engine's /metrics histograms over the level's own "
                   "requests (bucketed; percentiles interpolated as Prometheus does, means "
                   "exact)")


# Client and server means of the same requests count as agreeing within this share of the
# server's figure, or within AGREEMENT_FLOOR_MS (the HTTP hop and event loop cost a few ms).
AGREEMENT_TOLERANCE = 0.10


AGREEMENT_FLOOR_MS = 5.0


class Spread(TypedDict):
    mean: float
    p50: int
    min: int
    max: int


class Workload(TypedDict, total=False):
    """workload_summary(): what every level sent."""

    mode: str
    requests_per_level: int
    prompt_tokens: Spread
    output_tokens: Spread
    shared_prefix_tokens: int
    longest_request_tokens: int
    trace_span_s: float | None
    warmup_requests: int
    conversations: int  # multi-turn: requests_per_level counts their turns
    turns: int
    think_time_s: float
    # a trace whose lines say what they share (prefix_chunks): the requests that open with
    # a chunk another request opens with, and the tokens of those chunks over all of them
    requests_sharing_a_prefix: int
    shared_chunk_tokens: int


class GeneratorCeiling(TypedDict, total=False):
    """The load generator against a zero-work endpoint: its own limit."""

    boundary: str
    concurrency: int
    request_throughput: float
    output_throughput: float
    raw_file: str


@dataclass(frozen=True)
class LoadResult:
    boundary: str
    profile: dict[str, Any]  # the load profile as configured (config.LoadProfile)
    levels: list[LevelResult]
    name: str = ""  # the profile's name in the config
    workload: Workload = field(default_factory=lambda: Workload())
    generator: GeneratorCeiling = field(default_factory=lambda: GeneratorCeiling())
    # the same workload in later engine sessions (load.rounds), interleaved with the other
    # model's: the latency gates compare all rounds; every other figure is this round's
    rounds: list[LoadResult] = field(default_factory=list)
    # the heaviest level that holds the SLO, searched (capacity.py), and the levels it ran
    capacity: Capacity = field(default_factory=lambda: Capacity())
    searched: list[LevelResult] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> LoadResult:
        return cls(**{**data, "levels": [LevelResult(**x) for x in data["levels"]],
                      "rounds": [cls.from_dict(r) for r in data.get("rounds", [])],
                      "searched": [LevelResult(**x) for x in data.get("searched", [])]})

    def metrics(self) -> dict[str, float]:
        """Every level's figures, flattened for MLflow (keys start with the level)."""
        out: dict[str, float] = {}
        for lv in self.levels:
            out[f"{lv.key}.output_throughput"] = lv.output_throughput
            out[f"{lv.key}.request_throughput"] = lv.request_throughput
            out[f"{lv.key}.error_rate"] = lv.error_rate
            for stat in ("p50", "p95", "p99", "max"):
                for metric in ("ttft", "tpot", "itl", "e2el"):
                    out[f"{lv.key}.{metric}_{stat}_ms"] = getattr(lv, f"{metric}_ms")[stat]
            out.update({f"{lv.key}.{k}": float(v) for k, v in lv.slo.items()
                        if k in ("goodput_rps", "attainment") and isinstance(v, (int, float))})
            for metric, stats in lv.server.get("latency", {}).items():
                for stat in ("p50", "p99"):
                    out[f"{lv.key}.server.{metric.removesuffix('_ms')}_{stat}_ms"] = stats[stat]
            out.update(_engine_state(lv))
        if self.generator:
            out["generator.output_throughput"] = self.generator["output_throughput"]
        out.update({f"capacity.{k}": float(v) for k, v in self.capacity.items()
                    if k in ("held", "not_held", "request_throughput", "output_throughput")
                    and isinstance(v, (int, float))})
        stable = self.max_stable_level()
        if stable is not None:
            out["max_stable_level"] = self.levels.index(stable) + 1
            if stable.concurrency is not None:
                out["max_stable_concurrency"] = stable.concurrency
        return out

    def series(self) -> dict[str, list[float]]:
        """Figures with one step per level (lightest first): curves in the MLflow UI."""
        series: dict[str, list[float]] = {"load.output_throughput": [],
                                          "load.request_throughput": []}
        for lv in self.levels:
            series["load.output_throughput"].append(lv.output_throughput)
            series["load.request_throughput"].append(lv.request_throughput)
            for metric in ("ttft", "tpot", "e2el"):
                for stat in ("p50", "p99"):
                    series.setdefault(f"load.{metric}_{stat}_ms", []).append(
                        getattr(lv, f"{metric}_ms")[stat])
        return series

    def telemetry_steps(self) -> dict[str, list[tuple[int, float]]]:
        """Each level's telemetry series for MLflow, its step the milliseconds since the
        level's first read (so the UI's step axis is the level's own clock)."""
        steps: dict[str, list[tuple[int, float]]] = {}
        for lv in self.levels:
            samples = lv.telemetry.get("samples", [])
            for sample in samples:
                step = round(1000 * (sample["t_s"] - samples[0]["t_s"]))
                for name in ("running", "waiting", "kv_cache_usage", "preemptions"):
                    steps.setdefault(f"telemetry.{lv.key}.{name}", []).append(
                        (step, float(sample[name])))
        return steps

    def all_rounds(self) -> list[LoadResult]:
        return [self, *self.rounds]

    def level(self, key: str) -> LevelResult | None:
        return next((lv for lv in self.levels if lv.key == key), None)

    def max_stable_level(self) -> LevelResult | None:
        """The heaviest level (levels run lightest first) whose p99 TTFT and TPOT met the
        SLO with no error."""
        good = [lv for lv in self.levels if lv.slo.get("meets_slo")]
        return good[-1] if good else None

    @property
    def longest_request_tokens(self) -> int:
        return int(self.workload.get("longest_request_tokens", 0))


def _engine_state(lv: LevelResult) -> dict[str, float]:
    """A level's telemetry peaks and its over-saturation verdict (1 / 0), for MLflow."""
    out = {f"{lv.key}.{k}": float(v) for k, v in lv.telemetry.items()
           if k in ("peak_running", "peak_waiting", "peak_kv_cache_usage", "preemptions",
                    "prefix_cache_hit_rate") and isinstance(v, (int, float))}
    verdict = lv.saturation.get("over_saturated")
    if verdict is not None:
        out[f"{lv.key}.over_saturated"] = float(verdict)
    return out


def _sent(raw: dict) -> list[int]:
    """Indices of the requests the level really sent (not skipped by its duration bound)."""
    return [i for i, err in enumerate(raw["errors"]) if err != SKIPPED]


def slo_figures(raw: dict, slo: SLO) -> SLOFigures:
    """Per-request SLO judgement from vllm bench serve's detailed results.

    A request meets the SLO when its own TTFT and TPOT are within the targets (failed
    requests never do); goodput is such requests per second. The level meets the SLO when
    its p99 TTFT and TPOT are within the targets and nothing failed."""
    met = good_tokens = 0
    sent = _sent(raw)
    for i in sent:
        ttft, latency, out, err = (raw["ttfts"][i], raw["latencies"][i], raw["output_lens"][i],
                                   raw["errors"][i])
        if err or not out:
            continue
        tpot = (latency - ttft) / (out - 1) if out > 1 else 0.0
        if 1000 * ttft <= slo.ttft_p99_ms and 1000 * tpot <= slo.tpot_p99_ms:
            met, good_tokens = met + 1, good_tokens + out
    per_second = 1 / raw["duration"] if raw["duration"] else 0.0
    return {
        "ttft_p99_ms": slo.ttft_p99_ms, "tpot_p99_ms": slo.tpot_p99_ms,
        "goodput_rps": round(met * per_second, 4),
        "good_output_throughput": round(good_tokens * per_second, 4),
        "attainment": round(met / len(sent), 4) if sent else 0.0,
        "meets_slo": bool(raw["p99_ttft_ms"] <= slo.ttft_p99_ms
                          and raw["p99_tpot_ms"] <= slo.tpot_p99_ms
                          and not any(raw["errors"][i] for i in sent)),
    }


def cost_figures(level: LevelResult | None, price_per_hour: float) -> dict:
    """What serving costs at a load level: per million output tokens, and per request that
    met the SLO (or per completed request when no SLO is declared)."""
    if level is None or level.output_throughput <= 0:
        return {"price_per_hour": price_per_hour, "level": None, "concurrency": None}
    per_second = price_per_hour / 3600
    good_rps = level.slo.get("goodput_rps", level.request_throughput)
    figures = {"price_per_hour": price_per_hour, "level": level.key,
               "concurrency": level.concurrency,
               "usd_per_million_output_tokens": round(
                   per_second / level.output_throughput * 1e6, 4),
               "usd_per_good_request": round(per_second / good_rps, 6) if good_rps else None}
    good_tokens = level.slo.get("good_output_throughput")
    if good_tokens is not None:  # only tokens of requests that met the SLO count
        figures["usd_per_million_accepted_tokens"] = (
            round(per_second / good_tokens * 1e6, 4) if good_tokens else None)
    return figures


def _stats(raw: dict, metric: str) -> dict[str, float]:
    stats = {"mean": round(raw[f"mean_{metric}_ms"], 3)}
    for p in PERCENTILES:
        stats[f"p{p}"] = round(raw[f"p{p}_{metric}_ms"], 3)
    stats["max"] = round(_max_ms(raw, metric), 3)
    return stats


def per_request_ms(raw: dict, metric: str) -> np.ndarray:
    """One figure per completed request (ms) from vllm bench serve's detailed results; ITL
    pools every gap of every request."""
    ok = [i for i, err in enumerate(raw.get("errors", [])) if not err]
    ttft, lat, out = raw["ttfts"], raw["latencies"], raw["output_lens"]
    values = {
        "ttft": [ttft[i] for i in ok], "e2el": [lat[i] for i in ok],
        "tpot": [(lat[i] - ttft[i]) / (out[i] - 1) for i in ok if out[i] > 1],
        "itl": [gap for i in ok for gap in raw["itls"][i]],
    }[metric]
    return 1000 * np.asarray(values, dtype=float)


def _max_ms(raw: dict, metric: str) -> float:
    """The worst request's figure (vLLM reports percentiles only)."""
    values = per_request_ms(raw, metric)
    return float(values.max()) if values.size else math.nan


def level_label(profile: LoadProfile, level: float) -> str:
    prefix = {"concurrency": "c", "rate": "r", "trace": "x"}[profile.mode]
    return f"{prefix}{level:g}"


# Upper bounds (prompt tokens) of the buckets latency is also reported by; the last bucket
# is everything longer.
PROMPT_BUCKETS = (128, 512, 2048)


def _bucket(prompt_tokens: int) -> str:
    lower = 0
    for upper in PROMPT_BUCKETS:
        if prompt_tokens <= upper:
            return f"{lower + 1}-{upper}"
        lower = upper
    return f">{lower}"


def by_prompt_length(raw: dict) -> dict[str, BucketLatency]:
    """TTFT and TPOT of the completed requests per prompt-length bucket, shortest first;
    only buckets some request fell in."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for i in _sent(raw):
        tokens = raw["output_lens"][i]
        if raw["errors"][i] or not tokens:
            continue
        ttft, latency = raw["ttfts"][i], raw["latencies"][i]
        tpot = (latency - ttft) / (tokens - 1) if tokens > 1 else 0.0
        groups.setdefault(_bucket(int(raw["input_lens"][i])), []).append((ttft, tpot))
    order = [_bucket(b) for b in PROMPT_BUCKETS] + [_bucket(PROMPT_BUCKETS[-1] + 1)]
    out: dict[str, BucketLatency] = {}
    for name in (b for b in order if b in groups):
        ttfts, tpots = (1000 * np.asarray(col) for col in zip(*groups[name], strict=True))
        out[name] = {"requests": len(ttfts),
                     "ttft_p50_ms": round(float(np.percentile(ttfts, 50)), 3),
                     "ttft_p99_ms": round(float(np.percentile(ttfts, 99)), 3),
                     "tpot_p50_ms": round(float(np.percentile(tpots, 50)), 3)}
    return out


def parse_level(raw: dict, profile: LoadProfile, level: float, raw_file: Path) -> LevelResult:
    sent = _sent(raw)
    failed = sum(1 for i in sent if raw["errors"][i])
    return LevelResult(
        concurrency=int(level) if profile.mode == "concurrency" else profile.max_concurrency,
        completed=int(raw["completed"]),
        failed=failed,
        duration_s=round(raw["duration"], 3),
        request_throughput=round(raw["request_throughput"], 4),
        output_throughput=round(raw["output_throughput"], 3),
        ttft_ms=_stats(raw, "ttft"),
        tpot_ms=_stats(raw, "tpot"),
        itl_ms=_stats(raw, "itl"),
        e2el_ms=_stats(raw, "e2el"),
        raw_file=str(raw_file),
        label=level_label(profile, level),
        request_rate=level if profile.mode == "rate" else None,
        skipped=len(raw["errors"]) - len(sent),
        input_throughput=round(raw["total_input_tokens"] / raw["duration"], 3)
        if raw["duration"] else 0.0,
        by_prompt_length=by_prompt_length(raw),
    )


def agreement(level: LevelResult) -> Agreement:
    """Client vs server mean of each latency both boundaries measure, on the same requests.

    Means, not percentiles: the engine's histogram keeps the exact sum of what it observed,
    while its percentiles are only as fine as its buckets."""
    out: Agreement = {"tolerance": AGREEMENT_TOLERANCE, "floor_ms": AGREEMENT_FLOOR_MS}
    latency = level.server.get("latency", {})
    for metric, client in (("ttft_ms", level.ttft_ms), ("tpot_ms", level.tpot_ms),
                           ("e2el_ms", level.e2el_ms)):
        server = latency.get(metric, {}).get("mean", math.nan)
        if math.isnan(server):
            continue
        diff = client["mean"] - server
        out[metric.removesuffix("_ms")] = {  # type: ignore[literal-required]
            "client_mean_ms": client["mean"], "server_mean_ms": server,
            "diff_ms": round(diff, 3),
            "within": abs(diff) <= max(AGREEMENT_TOLERANCE * server, AGREEMENT_FLOOR_MS)}
    counted = latency.get("e2el_ms", {}).get("count")
    if counted is not None:
        out["server_requests"] = counted
        out["client_requests"] = level.completed
    return out


def workload_summary(profile: LoadProfile, requests: list[Request]) -> Workload:
    def spread(values: list[int]) -> Spread:
        ordered = sorted(values)
        return {"mean": round(sum(values) / len(values), 1),
                "p50": ordered[len(ordered) // 2], "min": ordered[0], "max": ordered[-1]}

    return {"mode": profile.mode, "requests_per_level": len(requests),
            "prompt_tokens": spread([r.prompt_tokens for r in requests]),
            "output_tokens": spread([r.output_tokens for r in requests]),
            "shared_prefix_tokens": profile.shared_prefix_tokens,
            "longest_request_tokens": max(r.prompt_tokens + r.output_tokens for r in requests),
            "trace_span_s": requests[-1].arrival_s if profile.mode == "trace" else None,
            "warmup_requests": profile.warmup_prompts, **_conversations(profile, requests),
            **_shared_chunks(requests)}


def _shared_chunks(requests: list[Request]) -> dict:
    """Of a trace's prefix_chunks, those two requests or more open with: how many requests
    open with one, and the tokens of those chunks summed over the requests."""
    uses = Counter(c for r in requests for c in r.prefix_chunks)
    shared = [sum(uses[c] > 1 for c in r.prefix_chunks) for r in requests]
    if not any(shared):
        return {}
    return {"requests_sharing_a_prefix": sum(n > 0 for n in shared),
            "shared_chunk_tokens": CHUNK_TOKENS * sum(shared)}


def _conversations(profile: LoadProfile, requests: list[Request]) -> dict:
    conv = profile.conversation
    if conv is None:
        return {}
    return {"conversations": len({r.conversation for r in requests}), "turns": conv.turns,
            "think_time_s": conv.think_time_s}


SKIPPED = "skipped: past --max-duration"  # vllm_bench.SKIPPED (that module imports vllm)
