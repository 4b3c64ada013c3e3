"""Load-test a served model at each declared concurrency level.

The load generator is vLLM's own serving benchmark (`vllm bench serve`), which lives in the
engine environment already: no extra dependency, works offline with a local tokenizer, keeps
per-request data (--save-detailed), and is the tool vLLM's maintainers measure with.
Its figures are client-side (request sent -> tokens received over HTTP streaming). Each
level also keeps the engine's own view: the difference of two /metrics scrapes around it
(engine_metrics.py), so the two boundaries can be compared on the same requests.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .config import SLO, LoadProfile
from .engine_metrics import parse_scrape, server_side_level
from .errors import InfraError
from .paths import engine_python, offline_env

__all__ = ["LevelResult", "LoadResult", "bench_command", "cost_figures", "run_load_test",
           "slo_figures"]

PERCENTILES = (50, 95, 99)
BOUNDARY = "client-side: HTTP streaming, measured by vllm bench serve"
SERVER_BOUNDARY = ("server-side: the engine's /metrics histograms over the level, its warm-up "
                   "requests included (bucketed; percentiles interpolated as Prometheus does)")


@dataclass(frozen=True)
class LevelResult:
    concurrency: int
    completed: int
    failed: int
    duration_s: float
    request_throughput: float  # requests/s
    output_throughput: float  # output tokens/s
    ttft_ms: dict[str, float]  # "p50" / "p95" / "p99" / "mean"
    tpot_ms: dict[str, float]
    itl_ms: dict[str, float]
    e2el_ms: dict[str, float]
    raw_file: str
    server: dict = field(default_factory=dict)  # engine_metrics.server_side_level(...)
    slo: dict = field(default_factory=dict)  # slo_figures(...): goodput, attainment, meets


@dataclass(frozen=True)
class LoadResult:
    boundary: str
    profile: dict
    levels: list[LevelResult]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> LoadResult:
        return cls(data["boundary"], data["profile"], [LevelResult(**x) for x in data["levels"]])

    def level(self, concurrency: int) -> LevelResult | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)

    def max_stable_level(self) -> LevelResult | None:
        """The highest concurrency whose p99 TTFT and TPOT met the SLO with no error."""
        good = [lv for lv in self.levels if lv.slo.get("meets_slo")]
        return max(good, key=lambda lv: lv.concurrency, default=None)


def slo_figures(raw: dict, slo: SLO) -> dict:
    """Per-request SLO judgement from vllm bench serve's detailed results.

    A request meets the SLO when its own TTFT and TPOT are within the targets (failed
    requests never do); goodput is such requests per second. The level meets the SLO when
    its p99 TTFT and TPOT are within the targets and nothing failed."""
    met = 0
    for ttft, latency, out, err in zip(raw["ttfts"], raw["latencies"], raw["output_lens"],
                                       raw["errors"], strict=True):
        if err or not out:
            continue
        tpot = (latency - ttft) / (out - 1) if out > 1 else 0.0
        met += 1000 * ttft <= slo.ttft_p99_ms and 1000 * tpot <= slo.tpot_p99_ms
    total = len(raw["ttfts"])
    return {
        "ttft_p99_ms": slo.ttft_p99_ms, "tpot_p99_ms": slo.tpot_p99_ms,
        "goodput_rps": round(met / raw["duration"], 4) if raw["duration"] else 0.0,
        "attainment": round(met / total, 4) if total else 0.0,
        "meets_slo": bool(raw["p99_ttft_ms"] <= slo.ttft_p99_ms
                          and raw["p99_tpot_ms"] <= slo.tpot_p99_ms
                          and not any(raw["errors"])),
    }


def cost_figures(level: LevelResult | None, price_per_hour: float) -> dict:
    """What serving costs at a load level: per million output tokens, and per request that
    met the SLO (or per completed request when no SLO is declared)."""
    if level is None or level.output_throughput <= 0:
        return {"price_per_hour": price_per_hour, "concurrency": None}
    per_second = price_per_hour / 3600
    good_rps = level.slo.get("goodput_rps", level.request_throughput)
    return {"price_per_hour": price_per_hour, "concurrency": level.concurrency,
            "usd_per_million_output_tokens": round(per_second / level.output_throughput * 1e6,
                                                   4),
            "usd_per_good_request": round(per_second / good_rps, 6) if good_rps else None}


def bench_command(
    base_url: str, served_name: str, tokenizer: Path, profile: LoadProfile, concurrency: int,
    out_file: Path,
) -> list[str]:
    return [
        str(engine_python()), "-m", "workbench._vllm_bench",
        "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", served_name, "--tokenizer", str(tokenizer),
        "--dataset-name", "random",
        "--random-input-len", str(profile.input_len),
        "--random-output-len", str(profile.output_len),
        "--num-prompts", str(profile.num_prompts),
        "--num-warmups", str(profile.warmup_prompts),
        "--max-concurrency", str(concurrency),
        "--request-rate", "inf",
        "--ignore-eos",  # every request generates exactly output_len tokens
        "--seed", str(profile.seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", ",".join(str(p) for p in PERCENTILES),
        "--save-result", "--save-detailed",
        "--result-dir", str(out_file.parent), "--result-filename", out_file.name,
        "--disable-tqdm",
    ]


def _stats(raw: dict, metric: str) -> dict[str, float]:
    stats = {"mean": round(raw[f"mean_{metric}_ms"], 3)}
    for p in PERCENTILES:
        stats[f"p{p}"] = round(raw[f"p{p}_{metric}_ms"], 3)
    return stats


def parse_level(raw: dict, concurrency: int, raw_file: Path) -> LevelResult:
    errors = [e for e in raw.get("errors", []) if e]
    return LevelResult(
        concurrency=concurrency,
        completed=int(raw["completed"]),
        failed=len(errors),
        duration_s=round(raw["duration"], 3),
        request_throughput=round(raw["request_throughput"], 4),
        output_throughput=round(raw["output_throughput"], 3),
        ttft_ms=_stats(raw, "ttft"),
        tpot_ms=_stats(raw, "tpot"),
        itl_ms=_stats(raw, "itl"),
        e2el_ms=_stats(raw, "e2el"),
        raw_file=str(raw_file),
    )


def run_load_test(
    base_url: str, served_name: str, tokenizer: Path, profile: LoadProfile, out_dir: Path,
    check_engine: Callable[[], None] = lambda: None,
    on_level: Callable[[LevelResult], None] = lambda _lv: None,
    scrape: Callable[[], str] | None = None,
) -> LoadResult:
    """One `vllm bench serve` run per concurrency level; each level's raw JSON is kept.

    scrape, when given, returns the engine's /metrics text: read before and after each
    level for the server-side figures."""
    out_dir.mkdir(parents=True, exist_ok=True)
    levels = []
    for concurrency in profile.concurrency:
        raw_file = out_dir / f"bench-c{concurrency}.json"
        log_file = out_dir / f"bench-c{concurrency}.log"
        cmd = bench_command(base_url, served_name, tokenizer, profile, concurrency, raw_file)
        before = parse_scrape(scrape()) if scrape else None
        with log_file.open("w") as log:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=offline_env())
        check_engine()
        if proc.returncode != 0 or not raw_file.exists():
            raise InfraError(
                f"load test at concurrency {concurrency} failed (exit {proc.returncode}); "
                f"see {log_file}"
            )
        raw = json.loads(raw_file.read_text())
        level = parse_level(raw, concurrency, raw_file)
        if profile.slo is not None:
            level = dataclasses.replace(level, slo=slo_figures(raw, profile.slo))
        if scrape and before:
            server = server_side_level(before, parse_scrape(scrape()))
            level = dataclasses.replace(level, server={"boundary": SERVER_BOUNDARY, **server})
        if level.completed == 0:
            raise InfraError(f"load test at concurrency {concurrency}: no request completed; "
                             f"see {raw_file}")
        levels.append(level)
        on_level(level)
    return LoadResult(boundary=BOUNDARY, profile=profile.model_dump(), levels=levels)
