"""A model's suites on every core and its load test on vLLM's binding (issue 55).

On a small CPU vLLM leaves one core to its engine-core process, so on two cores the suites
compute on one. Bound to every core they ran 1.36-1.87 times as fast with every greedy
answer the same, but the load test cannot share that binding: its client needs the spare
core (docs/load.md, "Where the suites compute"). So where serve/device.suite_binding picks
`every-core`, a model's suites run in an engine session of their own on every core, and
its load test in a fresh session on vLLM's binding, as a load round after the first does.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.console import Console

from workbench.config.run_config import RunConfig
from workbench.loadtest.workload import Request
from workbench.measure.measurement import MEASUREMENT_FILE, Measurement, measure
from workbench.measure.watch import SuiteWatch
from workbench.mechanisms.files import write_json
from workbench.serve.device import Binding
from workbench.suites.definition import Suite
from workbench.suites.results import SuiteResult

__all__ = ["measure_bound"]


def measure_bound(binding: Binding, cfg: RunConfig, role: str, model_dir: Path, served: str,
                  extra_args: list[str], suites: list[Suite], requests: list[Request],
                  tokenizer_dir: Path, out_dir: Path, console: Console, device: str,
                  further: dict[str, list[Request]] | None = None,
                  watch: SuiteWatch | None = None, done: dict[str, SuiteResult] | None = None,
                  load_test: bool = True, references: dict[str, dict[str, str]] | None = None,
                  own_memory: bool = True) -> Measurement:
    """measure() with the suites on `binding`: on vLLM's, one session for the suites and
    the load test, as before; on every core, a session for the suites and, unless the
    candidate was stopped or runs none, one on vLLM's binding for the load test."""
    left = [name for s in suites for name, _ in s.spec.runs() if name not in (done or {})]
    if binding == "vllm" or not left or cfg.endpoints.of(role) is not None:
        return measure(cfg, role, model_dir, served, extra_args, suites, requests,
                       tokenizer_dir, out_dir, console, device, further=further, watch=watch,
                       done=done, load_test=load_test, references=references,
                       own_memory=own_memory)
    answered = measure(cfg, role, model_dir, served, extra_args, suites, requests,
                       tokenizer_dir, out_dir, console, device, further=further, watch=watch,
                       done=done, references=references, binding=binding,
                       own_memory=own_memory)
    if answered.stopped is not None or not load_test:
        return answered
    console.print(f"  \\[{role}] the load test in a session on vLLM's own binding (the "
                  f"suites ran on {binding})")
    loaded = measure(cfg, role, model_dir, served, extra_args, [], requests, tokenizer_dir,
                     out_dir, console, device, further=further)
    both = replace(answered, load=loaded.load, further_load=loaded.further_load,
                   headroom=loaded.headroom,
                   wall_time_s=round(answered.wall_time_s + loaded.wall_time_s, 2))
    write_json(out_dir / MEASUREMENT_FILE, both.to_dict())
    return both
