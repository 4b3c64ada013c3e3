"""One model's load test on its running engine: each load profile the run gates, the
run's own first, its levels and capacity search printed as they finish."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from workbench.config.run_config import RunConfig
from workbench.loadtest.bench import run_load_test
from workbench.loadtest.client import LoadClient
from workbench.loadtest.results import LevelResult, LoadResult
from workbench.loadtest.saturation import state_text
from workbench.loadtest.workload import Request
from workbench.mechanisms.placement import apart
from workbench.mechanisms.progress import status
from workbench.mechanisms.timing import span
from workbench.serve.engine import Endpoint, EngineServer

__all__ = ["LOAD_DIR", "further_load_dir", "load_tests"]

LOAD_DIR = "load"  # a side's load test of the run's own profile, in its folder


def further_load_dir(profile: str) -> str:
    """The folder beside LOAD_DIR that a further load profile's files go to."""
    return f"{LOAD_DIR}-{profile}"


def _print_level(console: Console, role: str, lv: LevelResult) -> None:
    skipped = f", {lv.skipped} not sent (duration bound)" if lv.skipped else ""
    console.print(f"  \\[{role}] load {lv.key}: {lv.completed} requests, "
                  f"{lv.output_throughput:.1f} out tok/s, TTFT p50/p99 "
                  f"{lv.ttft_ms['p50']:.0f}/{lv.ttft_ms['p99']:.0f} ms, TPOT p50/p99 "
                  f"{lv.tpot_ms['p50']:.1f}/{lv.tpot_ms['p99']:.1f} ms{skipped}"
                  f"{state_text(lv.telemetry, lv.saturation)}")


def _print_searched(console: Console, role: str, lv: LevelResult, ok: bool, why: str) -> None:
    verdict = "[green]held[/]" if ok else "[red]did not hold[/]"
    console.print(f"  \\[{role}] capacity search {lv.key}: {verdict} ({escape(why)}), "
                  f"{lv.request_throughput:.2f} req/s, {lv.output_throughput:.1f} out tok/s")


def _load_test(cfg: RunConfig, name: str, server: EngineServer | Endpoint,
               requests: list[Request], tokenizer_dir: Path, out_dir: Path, console: Console,
               role: str, client: LoadClient, ceiling: bool) -> LoadResult:
    """One load profile's levels (and capacity search) on the running engine; a further
    profile's files go to load-<name>/ beside the run's own load/."""
    profile = cfg.load.profiles[name]
    folder = out_dir / (LOAD_DIR if name == cfg.load.profile else further_load_dir(name))
    with status(console, f"\\[{role}] load profile {name!r}: warm-up, levels "
                         f"{', '.join(f'{x:g}' for x in profile.levels)}"):
        return run_load_test(
            server.base_url, server.info.served_name, tokenizer_dir, profile,
            folder, requests, name=name, check_engine=server.check_alive,
            scrape=server.metrics, on_level=functools.partial(_print_level, console, role),
            on_searched=functools.partial(_print_searched, console, role), ceiling=ceiling,
            responsive=server.responsive, stall_s=cfg.engine.request_timeout_s,
            client=client)


def load_tests(cfg: RunConfig, server: EngineServer | Endpoint,
                profiles: dict[str, list[Request]], tokenizer_dir: Path, out_dir: Path,
                console: Console, role: str, client: LoadClient, ceiling: bool,
                engine_pgid: int | None) -> dict[str, LoadResult]:
    """Every load profile the run gates, the run's own first, with the engine and its
    client on separate cores on a CPU (mechanisms/placement.py)."""
    with span(f"{role}: load test", "load"), apart(engine_pgid, client.pgid) as placed:
        loads = {name: _load_test(cfg, name, server, reqs, tokenizer_dir, out_dir, console,
                                  role, client, ceiling and i == 0)
                 for i, (name, reqs) in enumerate(profiles.items())}
    if placed:
        loads = {name: dataclasses.replace(lr, boundary=f"{lr.boundary}; {placed}")
                 for name, lr in loads.items()}
    return loads
