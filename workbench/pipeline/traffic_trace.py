"""`workbench traffic-trace`: a traffic suite's requests as a load trace (plan/
traffic_load.py), written as the JSONL a load profile's `trace:` replays (docs/traffic.md,
"Load")."""

from __future__ import annotations

from pathlib import Path

from workbench.config.run_config import RunConfig
from workbench.loadtest.from_traffic import TrafficTrace
from workbench.loadtest.workload import trace_row
from workbench.mechanisms.jsonl import write_jsonl
from workbench.plan.traffic_load import derive_trace

__all__ = ["write_traffic_trace"]


def write_traffic_trace(cfg: RunConfig, suite_name: str, out: Path, rate: float | None,
                        answers: Path | None, seed: int) -> TrafficTrace:
    """The trace of a traffic suite's requests, written to `out`."""
    trace = derive_trace(cfg, suite_name, rate, answers, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(out, (trace_row(q) for q in trace.requests))
    return trace
