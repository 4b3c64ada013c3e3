"""A traffic suite's requests as the load test's (issue 49, item 4): each prompt templated
and counted by the config's model's own tokenizer (loadtest/from_traffic.py does the rest),
for `workbench traffic-trace` to write and for a load profile's `from_suite` to replay
(docs/traffic.md, "Load from the same traffic")."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from workbench.config.load import LoadProfile
from workbench.config.run_config import RunConfig
from workbench.loadtest.bench import level_requests
from workbench.loadtest.from_traffic import (
    RequestShape,
    TrafficTrace,
    answer_lengths,
    traffic_trace,
)
from workbench.loadtest.workload import Request, trace_row
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.jsonl import write_jsonl
from workbench.suites.definition import load_suite
from workbench.suites.traffic import TrafficRequest

__all__ = ["derive_trace", "replayed_requests"]


def _token_ids(tokenizer: Any, request: TrafficRequest) -> list[int]:
    encoded = tokenizer.apply_chat_template(
        list(request.messages), tools=list(request.tools) or None, add_generation_prompt=True,
        tokenize=True)
    ids = encoded["input_ids"] if isinstance(encoded, dict) or hasattr(
        encoded, "keys") else encoded
    return [int(i) for i in ids]


def derive_trace(cfg: RunConfig, suite_name: str, rate: float | None, answers: Path | None,
                 seed: int, where: str = "") -> TrafficTrace:
    """The trace of a traffic suite's requests (where: the config field that named it, for
    the errors; the command's arguments where empty)."""
    from transformers import AutoTokenizer  # the engine environment's, as vLLM's template

    try:
        suite = load_suite(suite_name)
    except InputError as err:
        if not where:
            raise
        raise InputError(f"{where}: {err}", [f"{where}: {p}" for p in err.problems]) from None
    if suite.spec.kind != "traffic":
        raise InputError(f"{where or suite_name}: {suite_name} is a {suite.spec.kind} suite; "
                         "a load test replays a traffic suite (kind: traffic)")
    if answers is not None and not answers.is_file():
        raise InputError(f"{where + '.answers' if where else '--answers'}: {answers} is not a "
                         f"file (a run's baseline/items-{suite.name}.jsonl)")
    lengths = _answer_lengths(answers, where) if answers is not None else None
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.resolved_path(cfg.base_dir))
    shapes = [RequestShape(r.id, _token_ids(tokenizer, r), r.max_tokens, r.timestamp)
              for r in (item.request for item in suite.items) if r is not None]
    try:
        return traffic_trace(shapes, suite.spec.max_tokens, lengths, rate, seed)
    except InputError as err:  # no rate for requests the log did not time
        rate_is = f"{where.removesuffix('.from_suite')}.arrival_rate" if where else "--rate"
        raise InputError(f"{rate_is}: {err}") from None


def _answer_lengths(answers: Path, where: str) -> dict[str, int]:
    try:
        return answer_lengths(answers)
    except (ValueError, KeyError, TypeError) as err:  # JSON, a line without id or length
        field = f"{where.removesuffix('.from_suite')}.answers" if where else "--answers"
        raise InputError(f"{field}: {answers} is not a run's items file: each line a JSON "
                         f"object with an id and completion_tokens ({type(err).__name__})"
                         ) from None


def replayed_requests(cfg: RunConfig, name: str, profile: LoadProfile) -> list[Request]:
    """A from_suite profile's requests: its suite's trace, read back as a trace file is, so
    that it is held to every check a user's trace is (workload.read_trace)."""
    assert profile.from_suite is not None
    answers = cfg.resolve(profile.answers) if profile.answers else None
    trace = derive_trace(cfg, profile.from_suite, profile.arrival_rate, answers, profile.seed,
                         f"load.profiles.{name}.from_suite")
    with tempfile.TemporaryDirectory(prefix="workbench-trace-") as tmp:
        path = Path(tmp) / f"{name}.jsonl"
        write_jsonl(path, (trace_row(q) for q in trace.requests))
        try:
            return level_requests(profile, path, cfg.engine.max_model_len)
        except InputError as err:  # its line is a request's, in the order they arrive
            said = str(err).replace(f"{path}:", "request ")
            raise InputError(f"load.profiles.{name}.from_suite: {profile.from_suite}, "
                             f"{said} (requests in the order they arrive)") from None
