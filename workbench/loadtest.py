"""Load-test a served model at each declared concurrency level.

The load generator is vLLM's own serving benchmark (`vllm bench serve`), which lives in the
engine environment already: no extra dependency, works offline with a local tokenizer, keeps
per-request data (--save-detailed), and is the tool vLLM's maintainers measure with.
Every figure here is client-side (request sent -> tokens received over HTTP streaming).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from .config import LoadProfile
from .errors import InfraError
from .paths import engine_python, offline_env

__all__ = ["LevelResult", "LoadResult", "bench_command", "run_load_test"]

PERCENTILES = (50, 95, 99)
BOUNDARY = "client-side: HTTP streaming, measured by vllm bench serve"


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
) -> LoadResult:
    """One `vllm bench serve` run per concurrency level; each level's raw JSON is kept."""
    out_dir.mkdir(parents=True, exist_ok=True)
    levels = []
    for concurrency in profile.concurrency:
        raw_file = out_dir / f"bench-c{concurrency}.json"
        log_file = out_dir / f"bench-c{concurrency}.log"
        cmd = bench_command(base_url, served_name, tokenizer, profile, concurrency, raw_file)
        with log_file.open("w") as log:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=offline_env())
        check_engine()
        if proc.returncode != 0 or not raw_file.exists():
            raise InfraError(
                f"load test at concurrency {concurrency} failed (exit {proc.returncode}); "
                f"see {log_file}"
            )
        level = parse_level(json.loads(raw_file.read_text()), concurrency, raw_file)
        if level.completed == 0:
            raise InfraError(f"load test at concurrency {concurrency}: no request completed; "
                             f"see {raw_file}")
        levels.append(level)
        on_level(level)
    return LoadResult(boundary=BOUNDARY, profile=profile.model_dump(), levels=levels)
