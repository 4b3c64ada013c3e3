"""Load-test a served model at each level of a declared workload.

The load generator is vLLM's own serving benchmark (`vllm bench serve`), which lives in the
engine environment already: no extra dependency, works offline with a local tokenizer, keeps
per-request data (--save-detailed), replays timed traces, draws Poisson or gamma arrivals,
and is the tool vLLM's maintainers measure with. GuideLLM would add a second HTTP stack and
its own dependency tree to the engine environment for the same figures. Workloads reach the
benchmark as timed-trace files (workload.py).
Its figures are client-side (request sent -> tokens received over HTTP streaming). Each
level also keeps the engine's own view: the difference of two /metrics scrapes around it
(engine_metrics.py), so the two boundaries can be compared on the same requests.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from typing_extensions import TypedDict

from workbench.config.run_config import SLO, LoadProfile
from workbench.loadtest.engine_metrics import ServerLevel, parse_scrape, server_side_level
from workbench.loadtest.workload import Request, draw_requests, read_trace, write_timed_trace
from workbench.mechanisms.errors import InfraError
from workbench.mechanisms.paths import engine_python, offline_env
from workbench.mechanisms.processes import free_port, spawn, stop_group

__all__ = ["AGREEMENT_TOLERANCE", "LevelResult", "LoadResult", "bench_command", "cost_figures",
           "level_requests", "per_request_ms", "run_load_test", "slo_figures"]

PERCENTILES = (50, 95, 99)
SKIPPED = "skipped: past --max-duration"  # vllm_bench.SKIPPED (that module imports vllm)
BOUNDARY = "client-side: HTTP streaming, measured by vllm bench serve"
SERVER_BOUNDARY = ("server-side: the engine's /metrics histograms over the level's own "
                   "requests (bucketed; percentiles interpolated as Prometheus does, means "
                   "exact)")
# Client and server means of the same requests count as agreeing within this share of the
# server's figure, or within AGREEMENT_FLOOR_MS (the HTTP hop and event loop cost a few ms).
AGREEMENT_TOLERANCE = 0.10
AGREEMENT_FLOOR_MS = 5.0


class SLOFigures(TypedDict, total=False):
    """slo_figures(): empty when the workload declares no SLO."""

    ttft_p99_ms: float
    tpot_p99_ms: float
    goodput_rps: float
    attainment: float
    meets_slo: bool


class MeanAgreement(TypedDict):
    client_mean_ms: float
    server_mean_ms: float
    diff_ms: float
    within: bool


class Agreement(TypedDict, total=False):
    """agreement(): client and server means of each latency on the same requests."""

    tolerance: float
    floor_ms: float
    ttft: MeanAgreement
    tpot: MeanAgreement
    e2el: MeanAgreement
    server_requests: float
    client_requests: int


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


class GeneratorCeiling(TypedDict, total=False):
    """The load generator against a zero-work endpoint: its own limit."""

    boundary: str
    concurrency: int
    request_throughput: float
    output_throughput: float
    raw_file: str


@dataclass(frozen=True)
class LevelResult:
    concurrency: int | None  # requests in flight at most (None: unbounded arrival-rate level)
    completed: int
    failed: int
    duration_s: float
    request_throughput: float  # requests/s
    output_throughput: float  # output tokens/s
    ttft_ms: dict[str, float]  # "p50" / "p95" / "p99" / "max" / "mean"
    tpot_ms: dict[str, float]
    itl_ms: dict[str, float]
    e2el_ms: dict[str, float]
    raw_file: str
    server: ServerLevel = field(default_factory=lambda: ServerLevel())
    slo: SLOFigures = field(default_factory=lambda: SLOFigures())
    label: str = ""  # "c8" (concurrency), "r2" (arrivals/s), "x1" (trace replay speed)
    request_rate: float | None = None  # arrivals per second, open-loop levels
    skipped: int = 0  # requests not sent: past the level's max_duration_s
    agreement: Agreement = field(default_factory=lambda: Agreement())

    @property
    def key(self) -> str:
        return self.label or f"c{self.concurrency}"

    @property
    def error_rate(self) -> float:
        sent = self.completed + self.failed
        return round(self.failed / sent, 4) if sent else 0.0


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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> LoadResult:
        return cls(**{**data, "levels": [LevelResult(**x) for x in data["levels"]],
                      "rounds": [cls.from_dict(r) for r in data.get("rounds", [])]})

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
        if self.generator:
            out["generator.output_throughput"] = self.generator["output_throughput"]
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


def _sent(raw: dict) -> list[int]:
    """Indices of the requests the level really sent (not skipped by its duration bound)."""
    return [i for i, err in enumerate(raw["errors"]) if err != SKIPPED]


def slo_figures(raw: dict, slo: SLO) -> SLOFigures:
    """Per-request SLO judgement from vllm bench serve's detailed results.

    A request meets the SLO when its own TTFT and TPOT are within the targets (failed
    requests never do); goodput is such requests per second. The level meets the SLO when
    its p99 TTFT and TPOT are within the targets and nothing failed."""
    met = 0
    sent = _sent(raw)
    for i in sent:
        ttft, latency, out, err = (raw["ttfts"][i], raw["latencies"][i], raw["output_lens"][i],
                                   raw["errors"][i])
        if err or not out:
            continue
        tpot = (latency - ttft) / (out - 1) if out > 1 else 0.0
        met += 1000 * ttft <= slo.ttft_p99_ms and 1000 * tpot <= slo.tpot_p99_ms
    return {
        "ttft_p99_ms": slo.ttft_p99_ms, "tpot_p99_ms": slo.tpot_p99_ms,
        "goodput_rps": round(met / raw["duration"], 4) if raw["duration"] else 0.0,
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
    return {"price_per_hour": price_per_hour, "level": level.key,
            "concurrency": level.concurrency,
            "usd_per_million_output_tokens": round(per_second / level.output_throughput * 1e6,
                                                   4),
            "usd_per_good_request": round(per_second / good_rps, 6) if good_rps else None}


def bench_command(base_url: str, served_name: str, tokenizer: Path, profile: LoadProfile,
                  level: float, trace_file: Path, chunk: int, n: int, out_file: Path) -> list[str]:
    """One `vllm bench serve` run of the requests in trace_file at one level."""
    cmd = [
        str(engine_python()), "-m", "workbench.subprocesses.vllm_bench",
        "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", served_name, "--tokenizer", str(tokenizer),
        "--dataset-name", "timed_trace", "--dataset-path", str(trace_file),
        "--timed-trace-chunk-hash-size", str(chunk),
        "--num-prompts", str(n), "--num-warmups", "0",  # warm-up is its own run
        "--seed", str(profile.seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", ",".join(str(p) for p in PERCENTILES),
        "--save-result", "--save-detailed",
        "--result-dir", str(out_file.parent), "--result-filename", out_file.name,
        "--disable-tqdm",
    ]  # timed_trace implies --ignore-eos: every request generates its output_tokens
    if profile.mode == "concurrency":
        cmd += ["--max-concurrency", str(int(level))]
    elif profile.mode == "rate":
        cmd += ["--no-self-timed", "--request-rate", str(level),
                "--burstiness", str(profile.burstiness)]
    else:
        cmd += ["--timed-trace-sec-multiplier", str(1 / level)]
    if profile.mode != "concurrency" and profile.max_concurrency:
        cmd += ["--max-concurrency", str(profile.max_concurrency)]
    if profile.max_duration_s:
        cmd += ["--max-duration", str(profile.max_duration_s)]
    return cmd


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


def level_requests(profile: LoadProfile, trace: Path | None, max_model_len: int
                   ) -> list[Request]:
    """The requests every level sends: the same mix at each level and for each model."""
    if trace is not None:
        requests = read_trace(trace, max_model_len)
        return requests[:profile.num_prompts] if profile.num_prompts else requests
    return draw_requests(profile, profile.requests_per_level or 16, profile.seed)


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
            "warmup_requests": profile.warmup_prompts}


WATCH_INTERVAL_S = 5.0
MISSED_PROBES = 3  # /health unanswered this many times in a row (5 s timeout each): hung


class Watchdog:
    """Whether the engine is still serving while a load client runs: the client itself
    would wait hours on a hung engine (vLLM's default request timeout is 6 h).

    Dead: the engine process has exited (check_alive raises). Hung: /health unanswered
    MISSED_PROBES times in a row, or no output token generated for stall_s while requests
    are in flight (an engine that answers /health but has stopped generating)."""

    def __init__(self, check_alive: Callable[[], None], responsive: Callable[[], bool],
                 scrape: Callable[[], str] | None, stall_s: float) -> None:
        self.check_alive, self.responsive, self.scrape = check_alive, responsive, scrape
        self.stall_s = stall_s
        self.reset()

    def reset(self) -> None:
        self.missed, self.tokens, self.progress_at = 0, -1.0, time.monotonic()

    def __call__(self) -> None:
        self.check_alive()
        if not self.responsive():
            self.missed += 1
            if self.missed >= MISSED_PROBES:
                raise InfraError(f"engine hung: /health unanswered {self.missed} times in a row "
                                 f"({WATCH_INTERVAL_S:.0f} s apart) during the load test")
            return
        self.missed = 0
        tokens = self._generated()
        now = time.monotonic()
        if tokens is None or tokens != self.tokens:
            self.tokens, self.progress_at = (tokens if tokens is not None else -1.0), now
        elif now - self.progress_at > self.stall_s:
            raise InfraError(f"engine stalled: no output token generated for "
                             f"{now - self.progress_at:.0f}s during the load test "
                             f"(engine.request_timeout_s {self.stall_s:.0f})")

    def _generated(self) -> float | None:
        if self.scrape is None:
            return None
        try:
            return parse_scrape(self.scrape()).counters.get("vllm:generation_tokens")
        except InfraError:
            return None


def _bench(cmd: list[str], log_file: Path, raw_file: Path, what: str,
           watch: Callable[[], None] = lambda: None) -> dict:
    """Run the load client, asking the watchdog every few seconds whether the engine is
    still serving; the client runs in its own process group and never outlives this."""
    proc = spawn(cmd, log_file, bench_env())
    next_watch = time.monotonic() + WATCH_INTERVAL_S
    try:
        while proc.poll() is None:
            time.sleep(0.2)
            if time.monotonic() >= next_watch:
                watch()
                next_watch = time.monotonic() + WATCH_INTERVAL_S
    finally:
        if proc.poll() is None:
            stop_group(proc, grace_s=2)
    if proc.returncode != 0 or not raw_file.exists():
        raise InfraError(f"load test {what} failed (exit {proc.returncode}); see {log_file}")
    return json.loads(raw_file.read_text())


def bench_env() -> dict[str, str]:
    # The benchmark seeds each prompt chunk from hash() of a string: a fixed hash seed makes
    # the prompts the same for the baseline and the candidate.
    return {**offline_env(), "PYTHONHASHSEED": "0"}


def _closed_loop(base_url: str, served_name: str, tokenizer: Path, profile: LoadProfile,
                 requests: list[Request], concurrency: int, name: str, salt: int,
                 out_dir: Path, watch: Callable[[], None] = lambda: None) -> dict:
    """The requests sent at once, `concurrency` in flight, outside the profile's levels (the
    warm-up, the generator's ceiling): its raw results, `bench-<name>.json`."""
    at_once = [dataclasses.replace(r, arrival_s=0.0) for r in requests]
    trace_file = out_dir / f"requests-{name}.jsonl"
    chunk = write_timed_trace(at_once, profile.shared_prefix_tokens, salt, trace_file)
    closed = profile.model_copy(update={"concurrency": [concurrency], "request_rate": None,
                                        "trace": None, "max_duration_s": None})
    raw_file = out_dir / f"bench-{name}.json"
    return _bench(bench_command(base_url, served_name, tokenizer, closed, concurrency,
                                trace_file, chunk, len(at_once), raw_file),
                  out_dir / f"bench-{name}.log", raw_file, name, watch)


def _warm_up(base_url: str, served_name: str, tokenizer: Path, profile: LoadProfile,
             requests: list[Request], out_dir: Path, watch: Callable[[], None]) -> None:
    """Requests at the heaviest level before the first one, counted in no figure."""
    warm = requests[:profile.warmup_prompts]
    _closed_loop(base_url, served_name, tokenizer, profile, warm, len(warm), "warmup", 999,
                 out_dir, watch)


GENERATOR_BOUNDARY = ("the same requests, closed loop at the heaviest level's concurrency, "
                      "against a zero-work endpoint (workbench/subprocesses/zero_work_server.py)")


def generator_ceiling(tokenizer: Path, profile: LoadProfile, requests: list[Request],
                      out_dir: Path) -> GeneratorCeiling:
    """What the load generator alone can carry: the level's requests answered at once by a
    zero-work endpoint. A level whose throughput nears this measured the client, not the
    engine."""
    concurrency = int(max(profile.concurrency or [profile.max_concurrency or len(requests)]))
    port = free_port()
    log_file = out_dir / "zero-work-server.log"
    proc = spawn([str(engine_python()), "-m", "workbench.subprocesses.zero_work_server", str(port)],
                 log_file, offline_env())
    try:
        _wait_for(f"http://127.0.0.1:{port}/health", proc, log_file)
        raw = _closed_loop(f"http://127.0.0.1:{port}", "zero-work", tokenizer, profile,
                           requests, concurrency, "generator", 998, out_dir)
    finally:
        stop_group(proc, grace_s=0)
    return {"boundary": GENERATOR_BOUNDARY, "concurrency": concurrency,
            "request_throughput": round(raw["request_throughput"], 3),
            "output_throughput": round(raw["output_throughput"], 1),
            "raw_file": str(out_dir / "bench-generator.json")}


def _wait_for(url: str, proc: subprocess.Popen, log_file: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise InfraError(f"zero-work endpoint exited with code {proc.returncode}; "
                             f"see {log_file}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise InfraError(f"zero-work endpoint not up after {timeout_s:.0f}s; see {log_file}")


def run_load_test(
    base_url: str, served_name: str, tokenizer: Path, profile: LoadProfile, out_dir: Path,
    requests: list[Request], name: str = "",
    check_engine: Callable[[], None] = lambda: None,
    on_level: Callable[[LevelResult], None] = lambda _lv: None,
    scrape: Callable[[], str] | None = None,
    ceiling: bool = True,
    responsive: Callable[[], bool] = lambda: True,
    stall_s: float = 300,
) -> LoadResult:
    """One `vllm bench serve` run per level, after a warm-up; each level's requests and raw
    per-request JSON are kept.

    scrape, when given, returns the engine's /metrics text: read before and after each
    level for the server-side figures; ceiling measures the load generator's own limit
    after the levels. responsive and stall_s feed the watchdog (Watchdog) that ends a level
    whose engine has hung."""
    out_dir.mkdir(parents=True, exist_ok=True)
    watch = Watchdog(check_engine, responsive, scrape, stall_s)
    if profile.warmup_prompts:
        _warm_up(base_url, served_name, tokenizer, profile, requests, out_dir, watch)
        check_engine()
    levels = []
    for index, value in enumerate(profile.levels):
        label = level_label(profile, value)
        trace_file = out_dir / f"requests-{label}.jsonl"
        chunk = write_timed_trace(requests, profile.shared_prefix_tokens, index, trace_file)
        raw_file = out_dir / f"bench-{label}.json"
        cmd = bench_command(base_url, served_name, tokenizer, profile, value, trace_file,
                            chunk, len(requests), raw_file)
        before = parse_scrape(scrape()) if scrape else None
        watch.reset()
        try:
            raw = _bench(cmd, out_dir / f"bench-{label}.log", raw_file, f"at level {label}",
                         watch)
        finally:
            check_engine()
        level = parse_level(raw, profile, value, raw_file)
        if profile.slo is not None:
            level = dataclasses.replace(level, slo=slo_figures(raw, profile.slo))
        if scrape and before:
            server = server_side_level(before, parse_scrape(scrape()))
            level = dataclasses.replace(level, server={"boundary": SERVER_BOUNDARY, **server})
            level = dataclasses.replace(level, agreement=agreement(level))
        if level.completed == 0:
            raise InfraError(f"load test at level {label}: no request completed; "
                             f"see {raw_file}")
        levels.append(level)
        on_level(level)
    generator = generator_ceiling(tokenizer, profile, requests, out_dir) if ceiling \
        else GeneratorCeiling()
    return LoadResult(boundary=BOUNDARY, profile=profile.model_dump(), levels=levels,
                      name=name, workload=workload_summary(profile, requests),
                      generator=generator)
