"""`workbench traffic-trace`: a traffic suite's requests as a load trace (loadtest/
from_traffic.py), each prompt templated and counted by the config's model's own tokenizer,
written as the JSONL a load profile's `trace:` replays (docs/traffic.md, "Load")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.config.run_config import RunConfig
from workbench.loadtest.from_traffic import (
    RequestShape,
    TrafficTrace,
    answer_lengths,
    traffic_trace,
)
from workbench.loadtest.workload import trace_row
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.jsonl import write_jsonl
from workbench.suites.definition import load_suite
from workbench.suites.traffic import TrafficRequest

__all__ = ["write_traffic_trace"]


def _token_ids(tokenizer: Any, request: TrafficRequest) -> list[int]:
    encoded = tokenizer.apply_chat_template(
        list(request.messages), tools=list(request.tools) or None, add_generation_prompt=True,
        tokenize=True)
    ids = encoded["input_ids"] if isinstance(encoded, dict) or hasattr(
        encoded, "keys") else encoded
    return [int(i) for i in ids]


def write_traffic_trace(cfg: RunConfig, suite_name: str, out: Path, rate: float | None,
                        answers: Path | None, seed: int) -> TrafficTrace:
    """The trace of a traffic suite's requests, written to `out`."""
    from transformers import AutoTokenizer  # the engine environment's, as vLLM's template

    suite = load_suite(suite_name)
    if suite.spec.kind != "traffic":
        raise InputError(f"{suite_name}: a {suite.spec.kind} suite; a trace is made from a "
                         "traffic suite (kind: traffic)")
    if answers is not None and not answers.is_file():
        raise InputError(f"--answers: {answers} is not a file (a run's "
                         f"baseline/items-{suite.name}.jsonl)")
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.resolved_path(cfg.base_dir))
    shapes = [RequestShape(r.id, _token_ids(tokenizer, r), r.max_tokens, r.timestamp)
              for r in (item.request for item in suite.items) if r is not None]
    trace = traffic_trace(shapes, suite.spec.max_tokens,
                          answer_lengths(answers) if answers else None, rate, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(out, (trace_row(q) for q in trace.requests))
    return trace
