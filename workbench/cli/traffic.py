"""`workbench traffic-trace`: a traffic suite as the load trace a profile replays."""

from __future__ import annotations

from pathlib import Path

import click

from workbench.cli.options import (
    config_option,
    console,
    debug_option,
    handle_errors,
    resolve_config,
)
from workbench.config.run_config import load_config
from workbench.loadtest.workload import CHUNK_TOKENS
from workbench.mechanisms.errors import InputError
from workbench.pipeline.traffic_trace import write_traffic_trace

__all__ = ["traffic_trace"]


@click.command(name="traffic-trace")
@click.argument("suite")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The trace file to write (JSONL: arrival_s, prompt_tokens, output_tokens, and "
                   "prefix_chunks where a prompt begins as another does).")
@click.option("--rate", type=float, default=None,
              help="Requests per second, drawn as Poisson arrivals (default: the log's own "
                   "timestamps, which every request must then have).")
@click.option("--answers", type=click.Path(path_type=Path), default=None,
              help="A run's baseline/items-<suite>.jsonl: each request's answer length as "
                   "the baseline measured it (default: each request's max_tokens).")
@click.option("--seed", type=int, default=0, show_default=True, help="For --rate's draws.")
@config_option
@debug_option
@handle_errors
def traffic_trace(suite: str, out: Path, rate: float | None, answers: Path | None, seed: int,
                  config_path: str) -> int:
    """Write a traffic suite's requests as a load trace: each prompt's length through the
    model's chat template and tokenizer, each answer's length, the arrivals, and the
    prefix every prompt shares. Prints the load profile that replays it. Only numbers are
    written: no prompt, no id."""

    if rate is not None and not rate > 0:
        raise InputError(f"--rate: {rate} (requests per second, more than 0)")
    cfg = load_config(resolve_config(config_path))
    trace = write_traffic_trace(cfg, suite, out, rate, answers, seed)
    prompts = sorted(q.prompt_tokens for q in trace.requests)
    sharing = sum(bool(q.prefix_chunks) for q in trace.requests)
    chunks = len({c for q in trace.requests for c in q.prefix_chunks})
    console.print(
        f"[green]✓[/] {out}: {len(prompts)} requests, prompt tokens median "
        f"{prompts[len(prompts) // 2]} (max {prompts[-1]}), {trace.shared_prefix_tokens} "
        f"shared by every prompt; {sharing} begin with a chunk of {CHUNK_TOKENS} tokens or "
        f"more that another prompt begins with ({chunks} such chunks, in the trace's "
        f"prefix_chunks); outputs: {trace.outputs}; arrivals: {trace.arrivals}")
    # the trace's prefix_chunks carry every prefix the prompts share; the profile's own
    # shared prefix would add another (workload.read_trace refuses both)
    shared = 0 if sharing else trace.shared_prefix_tokens
    console.print("a load profile that replays it (config's load.profiles):\n"
                  f"  {Path(suite).name}:\n    trace: {out}\n"
                  f"    shared_prefix_tokens: {shared}\n"
                  "    replay_speed: [1, 2]", markup=False)
    return 0
