"""A load trace from a team's traffic (loadtest/from_traffic.py): the prompts' own lengths,
the answers' lengths where a run measured them, the log's arrivals or a stated rate, and
the prefix every prompt shares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.loadtest.from_traffic import (
    RequestShape,
    answer_lengths,
    common_prefix,
    shared_chunks,
    traffic_trace,
)
from workbench.loadtest.workload import read_trace, trace_row
from workbench.mechanisms.errors import InputError

SYSTEM = [1, 2, 3, 4, 5, 6]  # a system prompt every request carries


def shapes(stamps: list[float | None]) -> list[RequestShape]:
    return [RequestShape(f"r{i}", SYSTEM + [10 + i] * (i + 1), 40 if i % 2 else None, t)
            for i, t in enumerate(stamps)]


def test_the_log_s_timestamps_give_the_arrivals_in_order() -> None:
    trace = traffic_trace(shapes([1000.5, 1000.0, 1003.0]), default_max_tokens=64)
    assert [(q.arrival_s, q.prompt_tokens) for q in trace.requests] == [
        (0.0, 8), (0.5, 7), (3.0, 9)]
    assert [q.output_tokens for q in trace.requests] == [40, 64, 64]  # own, else default
    assert trace.arrivals == "the log's timestamps"
    assert trace.outputs == "each request's max_tokens (an upper bound)"
    assert trace.shared_prefix_tokens == len(SYSTEM)


def test_a_rate_draws_arrivals_and_without_one_missing_timestamps_are_refused() -> None:
    with pytest.raises(InputError, match="1 of 3 requests have no timestamp: give a rate"):
        traffic_trace(shapes([0.0, None, 2.0]), default_max_tokens=64)
    trace = traffic_trace(shapes([None] * 200), default_max_tokens=64, rate=4.0, seed=1)
    offsets = [q.arrival_s for q in trace.requests]
    assert offsets[0] == 0.0 and offsets == sorted(offsets)
    assert 199 / offsets[-1] == pytest.approx(4.0, rel=0.2)  # about the stated rate
    again = traffic_trace(shapes([None] * 200), default_max_tokens=64, rate=4.0, seed=1)
    assert again.requests == trace.requests  # seeded


def test_measured_answer_lengths_replace_max_tokens(tmp_path: Path) -> None:
    items = tmp_path / "items-my-traffic.jsonl"
    items.write_text("".join(json.dumps({"id": f"r{i}", "completion_tokens": n}) + "\n"
                             for i, n in ((0, 12), (1, 0))))
    trace = traffic_trace(shapes([0.0, 1.0, 2.0]), 64, answers=answer_lengths(items))
    assert [q.output_tokens for q in trace.requests] == [12, 1, 64]  # an empty answer: 1
    assert trace.outputs == ("the answers' lengths measured for 2 of 3 requests; "
                             "max_tokens for the rest")


def test_the_shared_prefix_is_what_every_prompt_begins_with() -> None:
    assert common_prefix([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix([[5, 1], [1, 5]]) == 0 and common_prefix([]) == 0


def test_what_prompts_share_is_found_by_request_in_whole_chunks() -> None:
    support = list(range(100, 140))  # one segment's system prompt: 40 tokens
    prompts = [support + [1] * 9, support + [2] * 30, [7] * 50, support[:20] + [3] * 5,
               [7] * 15]
    assert shared_chunks(prompts) == [(0, 1), (0, 1), (), (0,), ()]
    # a chunk is named by everything before it: the same tokens after different openings
    # are different chunks
    assert shared_chunks([[1] * 16 + [5] * 16, [2] * 16 + [5] * 16]) == [(), ()]
    assert shared_chunks([[9] * 16]) == [()] and shared_chunks([]) == []


def test_the_trace_is_one_the_load_test_reads(tmp_path: Path) -> None:
    segment = list(range(200, 240))  # a system prompt half the requests carry
    rows = [RequestShape(f"r{i}", (segment if i % 2 else []) + [10 + i] * (5 + i), 16, None)
            for i in range(6)]
    trace = traffic_trace(rows, default_max_tokens=16, rate=2.0)
    assert sum(bool(q.prefix_chunks) for q in trace.requests) == 3
    assert {q.prefix_chunks for q in trace.requests} == {(), (0, 1)}
    out = tmp_path / "trace.jsonl"
    out.write_text("".join(json.dumps(trace_row(q)) + "\n" for q in trace.requests))
    assert read_trace(out, max_model_len=512) == trace.requests
