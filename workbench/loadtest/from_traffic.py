"""A load trace from a team's own traffic (issue 49, step 4): the requests' own prompt
lengths, their answers' lengths, their arrivals and the prefix they share, as the JSONL
trace a load profile replays (`trace:`, workload.py), so that the load test sends the
workload that will really be served.

- prompt tokens: each request's messages (and tools) through the model's chat template,
  counted by its own tokenizer;
- output tokens: each request's answer length where an earlier run measured it (the
  baseline's items file of the traffic suite: its completion_tokens), else its max_tokens
  (an upper bound: the trace says which);
- arrivals: the log's timestamps, offset from the first, where every request has one;
  else a Poisson process at a stated rate (seeded);
- the shared prefix: the longest run of leading tokens every prompt has (a chat template's
  header, a system prompt all requests carry), said in words;
- what the prompts share, by request: each prompt's leading 16-token chunks that another
  prompt begins with too (a system prompt that one segment carries), numbered so that the
  same number is the same tokens (Request.prefix_chunks): the load test's prompts then
  share what the real ones share, and the engine's prefix cache serves them alike.
Only numbers are written: no prompt text, no ids, no hash of a prompt's tokens.
"""

from __future__ import annotations

import collections
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.loadtest.workload import CHUNK_TOKENS, Request
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.jsonl import jsonl_lines

__all__ = ["RequestShape", "TrafficTrace", "answer_lengths", "common_prefix", "shared_chunks",
           "traffic_trace"]


@dataclass(frozen=True)
class RequestShape:
    """What the load test needs of one traffic request (suites/traffic.py reads them; the
    caller templates and tokenises its messages)."""

    id: str
    tokens: list[int]  # the prompt as the engine receives it, chat template applied
    max_tokens: int | None
    timestamp: float | None


@dataclass(frozen=True)
class TrafficTrace:
    requests: list[Request]  # in arrival order
    shared_prefix_tokens: int
    arrivals: str  # how the arrival offsets were derived, in words
    outputs: str  # where the output lengths come from, in words


def common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """The number of leading tokens every sequence shares."""
    if not sequences:
        return 0
    shortest = min(len(s) for s in sequences)
    for i in range(shortest):
        if any(s[i] != sequences[0][i] for s in sequences):
            return i
    return shortest


def shared_chunks(sequences: Sequence[Sequence[int]], chunk: int = CHUNK_TOKENS
                  ) -> list[tuple[int, ...]]:
    """Each sequence's leading whole chunks that some other sequence begins with too, as
    chunk numbers: equal numbers, equal tokens from the start (a chunk is named by its own
    tokens and the chunk before it, as the engine's prefix cache names its blocks).
    Numbered in order of first use, so nothing of the tokens is in the numbers."""
    interned: dict[tuple[int, tuple[int, ...]], int] = {}

    def chain(seq: Sequence[int]) -> list[int]:
        names, parent = [], -1
        for end in range(chunk, len(seq) + 1, chunk):
            parent = interned.setdefault((parent, tuple(seq[end - chunk:end])), len(interned))
            names.append(parent)
        return names

    chains = [chain(seq) for seq in sequences]
    uses = collections.Counter(name for names in chains for name in names)
    numbers: dict[int, int] = {}
    return [tuple(numbers.setdefault(n, len(numbers))
                  for n in itertools.takewhile(lambda n: uses[n] > 1, names))
            for names in chains]


def answer_lengths(items_file: Path) -> dict[str, int]:
    """Each request's answer length (completion tokens) in a run's items file."""
    out = {}
    for line in jsonl_lines(items_file):
        if line.strip():
            row = json.loads(line)
            out[str(row["id"])] = int(row.get("completion_tokens", 0))
    return out


def _arrivals(requests: Sequence[RequestShape], rate: float | None, seed: int
              ) -> tuple[list[float], str]:
    stamps = [r.timestamp for r in requests]
    if all(s is not None for s in stamps) and rate is None:
        first = min(s for s in stamps if s is not None)
        return [round((s or 0.0) - first, 3) for s in stamps], "the log's timestamps"
    if rate is None:
        missing = sum(s is None for s in stamps)
        raise InputError(f"{missing} of {len(stamps)} requests have no timestamp: give a "
                         "rate (requests per second) to draw their arrivals at")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, len(requests))
    offsets = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    return [round(float(t), 3) for t in offsets], f"Poisson at {rate:g} requests/s (seed {seed})"


def traffic_trace(requests: Sequence[RequestShape], default_max_tokens: int,
                  answers: dict[str, int] | None = None, rate: float | None = None,
                  seed: int = 0) -> TrafficTrace:
    """The trace of these requests (see the module's docstring). A rate overrides the
    log's timestamps."""
    ids = [r.tokens for r in requests]
    offsets, arrivals = _arrivals(requests, rate, seed)
    answered = answers or {}
    outputs = [max(1, answered[r.id]) if r.id in answered
               else (r.max_tokens or default_max_tokens) for r in requests]
    measured = sum(r.id in answered for r in requests)
    said = (f"the answers' lengths measured for {measured} of {len(requests)} requests"
            + ("; max_tokens for the rest" if measured < len(requests) else "")
            if measured else "each request's max_tokens (an upper bound)")
    trace = sorted((Request(t, len(p), o, prefix_chunks=c) for t, p, o, c in zip(
        offsets, ids, outputs, shared_chunks(ids), strict=True)), key=lambda q: q.arrival_s)
    return TrafficTrace(trace, common_prefix(ids), arrivals, said)
