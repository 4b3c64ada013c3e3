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

import contextlib
import dataclasses
import functools
import math
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from workbench.config.run_config import LoadProfile
from workbench.loadtest.capacity import Capacity, LevelFailed, search_capacity
from workbench.loadtest.client import WATCH_INTERVAL_S, LoadClient
from workbench.loadtest.engine_metrics import parse_scrape, server_side_level
from workbench.loadtest.results import (
    BOUNDARY,
    PERCENTILES,
    SERVER_BOUNDARY,
    GeneratorCeiling,
    LevelResult,
    LoadResult,
    agreement,
    level_label,
    parse_level,
    slo_figures,
    workload_summary,
)
from workbench.loadtest.saturation import saturation
from workbench.loadtest.telemetry import Sampler
from workbench.loadtest.workload import (
    Request,
    draw_requests,
    read_trace,
    write_conversations,
    write_timed_trace,
)
from workbench.mechanisms.errors import InfraError
from workbench.mechanisms.paths import engine_python, offline_env
from workbench.mechanisms.processes import free_port, spawn, stop_group

__all__ = ["GENERATOR_BOUNDARY", "MISSED_PROBES", "Watchdog", "bench_args", "generator_ceiling",
           "level_requests", "run_load_test"]


def bench_args(base_url: str, served_name: str, tokenizer: Path, profile: LoadProfile,
               level: float, trace_file: Path, chunk: int, n: int, out_file: Path) -> list[str]:
    """One `vllm bench serve` run of the requests in trace_file at one level: the
    arguments of `python -m workbench.subprocesses.vllm_bench` (client.py runs them)."""
    cmd = [
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


def level_requests(profile: LoadProfile, trace: Path | None, max_model_len: int
                   ) -> list[Request]:
    """The requests every level sends: the same mix at each level and for each model."""
    if trace is not None:
        requests = read_trace(trace, max_model_len, profile.shared_prefix_tokens)
        return requests[:profile.num_prompts] if profile.num_prompts else requests
    return draw_requests(profile, profile.requests_per_level or 16, profile.seed)


SEARCH_SALT = 100  # the capacity search's levels draw prompt tokens apart from the named ones'
LENGTHENED_SALT = 10_000  # apart from every search level's own salt

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

    def reset(self, generated: Callable[[], float | None] | None = None) -> None:
        """A new run. generated: where the output-token count comes from while it runs (a
        level's telemetry sampler, which reads /metrics anyway); else a scrape of its own.
        Every /metrics read costs the engine's API server time (docs/load.md)."""
        self.missed, self.tokens, self.progress_at = 0, -1.0, time.monotonic()
        self.generated = generated

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
        if self.generated is not None:
            return self.generated()
        if self.scrape is None:
            return None
        try:
            return parse_scrape(self.scrape()).counters.get("vllm:generation_tokens")
        except InfraError:
            return None


def _closed_loop(client: LoadClient, base_url: str, served_name: str, tokenizer: Path,
                 profile: LoadProfile, requests: list[Request], concurrency: int, name: str,
                 salt: int, out_dir: Path, watch: Callable[[], None] = lambda: None) -> dict:
    """The requests sent at once, `concurrency` in flight, outside the profile's levels (the
    warm-up, the generator's ceiling): its raw results, `bench-<name>.json`."""
    at_once = [dataclasses.replace(r, arrival_s=0.0) for r in requests]
    trace_file = out_dir / f"requests-{name}.jsonl"
    chunk = write_timed_trace(at_once, profile.shared_prefix_tokens, salt, trace_file)
    closed = profile.model_copy(update={"concurrency": [concurrency], "request_rate": None,
                                        "trace": None, "max_duration_s": None})
    raw_file = out_dir / f"bench-{name}.json"
    return client.run(bench_args(base_url, served_name, tokenizer, closed, concurrency,
                                 trace_file, chunk, len(at_once), raw_file),
                      out_dir / f"bench-{name}.log", raw_file, name, watch)


GENERATOR_BOUNDARY = ("the same requests, closed loop at the heaviest level's concurrency, "
                      "against a zero-work endpoint (workbench/subprocesses/zero_work_server.py)")


def generator_ceiling(client: LoadClient, tokenizer: Path, profile: LoadProfile,
                      requests: list[Request], out_dir: Path) -> GeneratorCeiling:
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
        raw = _closed_loop(client, f"http://127.0.0.1:{port}", "zero-work", tokenizer, profile,
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


@dataclasses.dataclass(frozen=True)
class Session:
    """What every level of one load test sends through: the client, the engine, and the
    watch kept on it."""

    client: LoadClient
    base_url: str
    served_name: str
    tokenizer: Path
    profile: LoadProfile
    requests: list[Request]
    watch: Watchdog
    check_engine: Callable[[], None]
    scrape: Callable[[], str] | None


def _level(s: Session, value: float, salt: int, out_dir: Path) -> LevelResult:
    """One level: its requests sent (their prompt tokens drawn with `salt`, so no level
    hits another's prefix cache), then what they measured (_measured)."""
    label = level_label(s.profile, value)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw_file = out_dir / f"bench-{label}.json"
    if s.profile.conversation is not None:
        args = _chat_args(s, value, salt, out_dir / f"conversations-{label}.json", raw_file)
    else:
        trace_file = out_dir / f"requests-{label}.jsonl"
        chunk = write_timed_trace(s.requests, s.profile.shared_prefix_tokens, salt,
                                  trace_file)
        args = bench_args(s.base_url, s.served_name, s.tokenizer, s.profile, value,
                          trace_file, chunk, len(s.requests), raw_file)
    with contextlib.ExitStack() as during:
        sampler = during.enter_context(Sampler(s.scrape, s.profile.telemetry_interval_s)) \
            if s.scrape else None
        s.watch.reset(sampler.generated if sampler else None)
        try:
            raw = s.client.run(args, out_dir / f"bench-{label}.log", raw_file,
                               f"at level {label}", s.watch)
        finally:
            s.check_engine()
    level = _measured(raw, s.profile, value, raw_file, sampler)
    if level.completed == 0:
        raise InfraError(f"load test at level {label}: no request completed; see {raw_file}")
    return level


def _chat_args(s: Session, value: float, salt: int, spec_file: Path, raw_file: Path
               ) -> list[str]:
    """A conversation level: its conversations written for the chat client
    (subprocesses/chat_sessions.py), `value` of them in flight."""
    write_conversations(s.requests, s.profile.shared_prefix_tokens, salt, spec_file)
    args = ["--conversations", str(spec_file), "--base-url", s.base_url, "--model",
            s.served_name, "--tokenizer", str(s.tokenizer), "--max-concurrency",
            str(int(value)), "--result-dir", str(raw_file.parent),
            "--result-filename", raw_file.name]
    return args + (["--max-duration", str(s.profile.max_duration_s)]
                   if s.profile.max_duration_s else [])


def _measured(raw: dict, profile: LoadProfile, value: float, raw_file: Path,
              sampler: Sampler | None) -> LevelResult:
    """The client's figures, the SLO's, the over-saturation test, and the engine's own
    from the /metrics series read through the level."""
    level = parse_level(raw, profile, value, raw_file)
    level = dataclasses.replace(level, saturation=saturation(raw))
    if profile.slo is not None:
        level = dataclasses.replace(level, slo=slo_figures(raw, profile.slo))
    if sampler is not None:
        # the series' first and last reads bracket the level: its server-side figures
        server = server_side_level(*sampler.bracket())
        level = dataclasses.replace(level, server={"boundary": SERVER_BOUNDARY, **server},
                                    telemetry=sampler.telemetry())
        level = dataclasses.replace(level, agreement=agreement(level))
    return level


def run_load_test(
    base_url: str, served_name: str, tokenizer: Path, profile: LoadProfile, out_dir: Path,
    requests: list[Request], name: str = "",
    check_engine: Callable[[], None] = lambda: None,
    on_level: Callable[[LevelResult], None] = lambda _lv: None,
    on_searched: Callable[[LevelResult, bool, str], None] = lambda *_: None,
    scrape: Callable[[], str] | None = None,
    ceiling: bool = True,
    responsive: Callable[[], bool] = lambda: True,
    stall_s: float = 300,
    client: LoadClient | None = None,
) -> LoadResult:
    """One `vllm bench serve` run per level, after a warm-up; each level's requests and raw
    per-request JSON are kept.

    scrape, when given, returns the engine's /metrics text: read before and after each
    level for the server-side figures; ceiling measures the load generator's own limit
    after the levels. responsive and stall_s feed the watchdog (Watchdog) that ends a level
    whose engine has hung. client: the session's load client (started beforehand, and
    left running); without one, a client for this call. When the profile asks for a
    capacity search (profile.capacity), it runs after the named levels, each of its levels
    reported to on_searched with whether it held and why."""
    out_dir.mkdir(parents=True, exist_ok=True)
    watch = Watchdog(check_engine, responsive, scrape, stall_s)
    with contextlib.ExitStack() as own:
        bench = client or own.enter_context(LoadClient(out_dir / "bench-client.log"))
        if profile.warmup_prompts:
            warm = requests[:profile.warmup_prompts]  # at the heaviest level, in no figure
            _closed_loop(bench, base_url, served_name, tokenizer, profile, warm, len(warm),
                         "warmup", 999, out_dir, watch)
            check_engine()
        session = Session(bench, base_url, served_name, tokenizer, profile, requests, watch,
                          check_engine, scrape)
        levels = []
        for index, value in enumerate(profile.levels):
            levels.append(_level(session, value, index, out_dir))
            on_level(levels[-1])
        capacity, searched = _search(session, out_dir / "capacity", levels, on_searched)
        generator = generator_ceiling(bench, tokenizer, profile, requests, out_dir) if ceiling \
            else GeneratorCeiling()
    return LoadResult(boundary=BOUNDARY, profile=profile.model_dump(), levels=levels,
                      name=name, workload=workload_summary(profile, requests),
                      generator=generator, capacity=capacity, searched=searched)


def _search(s: Session, out_dir: Path, named: list[LevelResult],
            on_searched: Callable[[LevelResult, bool, str], None]
            ) -> tuple[Capacity, list[LevelResult]]:
    """The capacity search, when the profile asks for one, in its own folder (capacity/):
    every level it runs sends the profile's requests, salted apart from the named levels',
    which it counts as tried (the same knob, the same requests, this session)."""
    spec = s.profile.capacity
    if spec is None:
        return Capacity(), []
    knob = "concurrency" if s.profile.mode == "concurrency" else "request_rate"
    start = spec.start or s.profile.levels[0]
    known = {float((lv.concurrency if knob == "concurrency" else lv.request_rate) or 0): lv
             for lv in named}
    most = math.inf if _level_seconds(s.profile) else _top(knob, len(s.requests), named)
    return search_capacity(spec, knob, start, most,
                           functools.partial(_search_level, s, out_dir), on_searched, known)


def _level_seconds(profile: LoadProfile) -> float | None:
    """How long each searched level's arrivals last, when the search sizes its levels by
    time (arrival rates with level_seconds); None when every level sends the profile's
    requests."""
    spec = profile.capacity
    return spec.level_seconds if spec is not None and profile.mode == "rate" else None


def _sized(s: Session, value: float, times: int = 1) -> Session:
    """The session a search level sends: at an arrival rate with the search's level_seconds,
    that many seconds of arrivals (the profile's requests first, more drawn the same way);
    otherwise the profile's requests; `times` that length, for a level too short to judge
    (capacity.py). A level of a fixed count at a rate the engine cannot sustain ends before
    a queue has built (docs/load.md, "Capacity at the SLO")."""
    seconds = _level_seconds(s.profile)
    once = max(math.ceil(value * seconds), len(s.requests)) if seconds is not None \
        else len(s.requests)
    n = once * times
    if n <= len(s.requests):
        return s
    more = draw_requests(s.profile, n, s.profile.seed)
    return dataclasses.replace(s, requests=s.requests + more[len(s.requests):])


def _top(knob: str, requests: int, named: list[LevelResult]) -> float:
    """The heaviest level worth trying: past it a level sends the same requests all at once
    again. In flight: the level's requests. Arrivals per second: the level's requests
    within the shortest median lifetime of a request the named levels saw (faster, they
    all arrive before the first one ends)."""
    if knob == "concurrency":
        return float(requests)
    lifetimes = [lv.e2el_ms["p50"] / 1000 for lv in named if lv.e2el_ms.get("p50", 0) > 0]
    return requests / min(lifetimes) if lifetimes else math.inf


def _search_level(s: Session, out_dir: Path, value: float, index: int,
                  times: int = 1) -> LevelResult:
    """One search level (`times` its length: capacity.py); a level that ends without
    figures on a live engine did not hold (capacity.LevelFailed), a dead engine ends the
    load test."""
    try:
        # a lengthened level draws fresh prompts: the shorter run's are in the prefix cache
        salt = SEARCH_SALT + index + (times - 1) * LENGTHENED_SALT
        return _level(_sized(s, value, times), value, salt, out_dir)
    except InfraError as err:
        s.check_engine()
        raise LevelFailed(str(err).splitlines()[0][:200]) from err

