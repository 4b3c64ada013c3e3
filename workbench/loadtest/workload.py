"""The requests of one load level, written in the form vLLM's serving benchmark replays.

`vllm bench serve --dataset-name timed_trace` reads JSONL lines of (timestamp, input length,
output length, hash ids) and builds each prompt from the hash ids: every id stands for a
fixed run of random token ids (its chunk), the same run wherever the id recurs. So one
format carries everything a workload declares here: length distributions (the lengths),
a shared prefix (the same leading ids in every request), arrival offsets (the timestamps),
and the benchmark keeps its per-request data. What is written here: drawing the lengths
from the profile's distributions, reading and checking a user's trace, and giving each
request its ids.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.config.run_config import LengthDist, LoadProfile
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.jsonl import jsonl_lines

__all__ = ["CHUNK_TOKENS", "Request", "draw_conversation", "draw_requests", "read_trace",
           "trace_row", "write_conversations", "write_timed_trace"]

CHUNK_TOKENS = 16  # the benchmark's default chunk (--timed-trace-chunk-hash-size)
SHARED_CHUNK_IDS = 10**8  # a trace's prefix_chunks, apart from the shared prefix's and salts'
MAX_CHUNK_NUMBER = 10**8  # so that SHARED_CHUNK_IDS + a number stays below every salted id

TRACE_FIELDS = {"arrival_s": float, "prompt_tokens": int, "output_tokens": int}


@dataclass(frozen=True)
class Request:
    arrival_s: float  # offset from the level's start; 0 for a closed-loop or rate level
    prompt_tokens: int
    output_tokens: int
    # a turn of a multi-turn conversation (profile.conversation): which one, and the pause
    # before it is sent once the previous turn's answer has arrived; -1: a lone request
    conversation: int = -1
    think_s: float = 0.0
    # the prompt's leading chunks of CHUNK_TOKENS that other requests of a trace share
    # (a system prompt one segment carries: loadtest/from_traffic.py), by chunk number; the
    # same number is the same tokens wherever it occurs, so the engine's prefix cache
    # serves them as it would serve the real prompts
    prefix_chunks: tuple[int, ...] = ()


def draw_lengths(dist: LengthDist, rng: np.random.Generator, n: int) -> list[int]:
    if dist.distribution == "fixed":
        return [int(dist.value or 0)] * n
    assert dist.max is not None
    if dist.distribution == "uniform":
        return [int(x) for x in rng.integers(dist.min, dist.max, size=n, endpoint=True)]
    assert dist.median is not None and dist.sigma is not None
    drawn = rng.lognormal(mean=math.log(dist.median), sigma=dist.sigma, size=n)
    return [int(x) for x in np.clip(np.rint(drawn), dist.min, dist.max)]


def draw_requests(profile: LoadProfile, n: int, seed: int) -> list[Request]:
    """n synthetic requests: lengths drawn independently, all arriving at offset 0 (a
    closed-loop level paces them by concurrency, a rate level by its arrival process).
    With profile.conversation, n conversations, each a run of turns (draw_conversation)."""
    rng = np.random.default_rng(seed)
    prompts = draw_lengths(profile.prompt_tokens, rng, n)
    outputs = draw_lengths(profile.output_tokens, rng, n)
    if profile.conversation is None:
        return [Request(0.0, p, o) for p, o in zip(prompts, outputs, strict=True)]
    return [turn for i, first in enumerate(prompts)
            for turn in draw_conversation(profile, i, first, outputs[i], rng)]


def draw_conversation(profile: LoadProfile, index: int, first_prompt: int, first_output: int,
                      rng: np.random.Generator) -> list[Request]:
    """One conversation's turns: the first prompt as drawn, then each turn's prompt the
    conversation so far (every prompt and answer before it) plus a user message; every
    answer's length drawn from output_tokens, every pause before a later turn from an
    exponential of mean think_time_s."""
    conv = profile.conversation
    assert conv is not None
    later = conv.turns - 1
    users = draw_lengths(conv.user_tokens, rng, later)
    outputs = [first_output, *draw_lengths(profile.output_tokens, rng, later)]
    pauses = rng.exponential(conv.think_time_s, later) if conv.think_time_s else [0.0] * later
    turns = [Request(0.0, first_prompt, outputs[0], index)]
    for k in range(later):
        context = turns[-1].prompt_tokens + turns[-1].output_tokens + users[k]
        turns.append(Request(0.0, context, outputs[k + 1], index, round(float(pauses[k]), 3)))
    return turns


def read_trace(path: Path, max_model_len: int, shared_prefix_tokens: int = 0
               ) -> list[Request]:
    """A user's trace: one JSON object per line with arrival_s (seconds from the trace's
    start, non-decreasing), prompt_tokens and output_tokens, and optionally prefix_chunks
    (Request). Every problem names its line. A trace whose lines say what they share takes
    no profile's shared_prefix_tokens besides."""
    if not path.is_file():
        raise InputError(f"{path}: load trace not found")
    requests: list[Request] = []
    before: dict[int, int] = {}  # each shared chunk's number -> the number before it (-1)
    for lineno, line in enumerate(jsonl_lines(path), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise InputError(f"{path}:{lineno}: expected an object with "
                             f"{', '.join(TRACE_FIELDS)}")
        values = {}
        for key, kind in TRACE_FIELDS.items():
            value = row.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                    kind is int and not float(value).is_integer()):
                raise InputError(f"{path}:{lineno}: {key} must be a "
                                 f"{'whole number' if kind is int else 'number'} (got {value!r})")
            values[key] = kind(value)
        req = Request(**values, prefix_chunks=_prefix_chunks(row.get("prefix_chunks"),
                                                             path, lineno))
        if req.arrival_s < 0 or req.prompt_tokens < 1 or req.output_tokens < 1:
            raise InputError(f"{path}:{lineno}: arrival_s must be >= 0 and token counts >= 1")
        if requests and req.arrival_s < requests[-1].arrival_s:
            raise InputError(f"{path}:{lineno}: arrival_s {req.arrival_s} is before the "
                             f"previous line's {requests[-1].arrival_s}; sort the trace")
        _same_place(req.prefix_chunks, before, path, lineno)
        if len(req.prefix_chunks) * CHUNK_TOKENS > req.prompt_tokens:
            raise InputError(f"{path}:{lineno}: prefix_chunks cover "
                             f"{len(req.prefix_chunks) * CHUNK_TOKENS} tokens, more than its "
                             f"prompt_tokens ({req.prompt_tokens})")
        if req.prompt_tokens + req.output_tokens > max_model_len:
            raise InputError(f"{path}:{lineno}: {req.prompt_tokens} + {req.output_tokens} "
                             f"tokens exceed engine.max_model_len ({max_model_len})")
        requests.append(req)
    if not requests:
        raise InputError(f"{path}: load trace holds no request")
    if shared_prefix_tokens and any(r.prefix_chunks for r in requests):
        raise InputError(f"{path}: its lines carry prefix_chunks, which say what the requests "
                         f"share; the profile's shared_prefix_tokens ({shared_prefix_tokens}) "
                         "would add another prefix: set it to 0")
    return requests


def trace_row(req: Request) -> dict:
    """A request as a trace line, as read_trace reads it back."""
    return {"arrival_s": req.arrival_s, "prompt_tokens": req.prompt_tokens,
            "output_tokens": req.output_tokens,
            **({"prefix_chunks": list(req.prefix_chunks)} if req.prefix_chunks else {})}


def _prefix_chunks(value: object, path: Path, lineno: int) -> tuple[int, ...]:
    """A trace line's optional prefix_chunks: chunk numbers (whole numbers >= 0)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_CHUNK_NUMBER
            for v in value):
        raise InputError(f"{path}:{lineno}: prefix_chunks must be a list of whole numbers "
                         f"from 0 to {MAX_CHUNK_NUMBER - 1} (the shared {CHUNK_TOKENS}-token "
                         "chunks, by number)")
    return tuple(value)


def _same_place(chunks: tuple[int, ...], before: dict[int, int], path: Path,
                lineno: int) -> None:
    """A chunk number stands for the same tokens from the prompt's start: after the same
    number (or first) on every line, as workbench traffic-trace numbers them."""
    for prev, chunk in zip((-1, *chunks), chunks, strict=False):
        if before.setdefault(chunk, prev) != prev:
            where = "first" if before[chunk] == -1 else f"after {before[chunk]}"
            raise InputError(f"{path}:{lineno}: prefix_chunks: {chunk} follows "
                             f"{'nothing' if prev == -1 else prev} here but came {where} on "
                             "an earlier line (a number is the same tokens from the prompt's "
                             "start)")


def chunk_tokens(shared_prefix_tokens: int) -> int:
    """A chunk size that ends the shared prefix on a chunk boundary."""
    return math.gcd(CHUNK_TOKENS, shared_prefix_tokens) if shared_prefix_tokens else CHUNK_TOKENS


def write_timed_trace(requests: list[Request], shared_prefix_tokens: int, salt: int,
                      path: Path) -> int:
    """Write requests as the benchmark's timed-trace JSONL; return the chunk size to pass.

    The first chunks of every request are the shared prefix (the same ids everywhere);
    the rest are ids no other request has, offset by salt so that two levels never send
    each other's prompts (the engine's prefix cache would otherwise serve the second level
    from the first one's blocks)."""
    chunk = chunk_tokens(shared_prefix_tokens)
    prefix_ids = list(range(shared_prefix_tokens // chunk))
    next_id = (salt + 1) * 10**9
    with path.open("w") as out:
        for req in requests:
            # a trace's own shared chunks (read_trace) are unsalted, as the profile's shared
            # prefix: a system prompt stays cached from one level to the next
            shared = [SHARED_CHUNK_IDS + c for c in req.prefix_chunks] if req.prefix_chunks \
                else prefix_ids
            covered = len(req.prefix_chunks) * chunk if req.prefix_chunks \
                else shared_prefix_tokens
            own = math.ceil((req.prompt_tokens - covered) / chunk)
            ids = shared + list(range(next_id, next_id + own))
            next_id += own
            out.write(json.dumps({"timestamp": req.arrival_s, "input_length": req.prompt_tokens,
                                  "output_length": req.output_tokens, "hash_ids": ids}) + "\n")
    return chunk


def write_conversations(requests: list[Request], shared_prefix_tokens: int, salt: int,
                        path: Path) -> int:
    """Write a conversation level for the chat client (subprocesses/chat_sessions.py): per
    conversation its turns' prompt and answer lengths and pauses, the shared prefix, and a
    seed salted per level (no level sends another's tokens); return the conversation count.
    Each turn's prompt is the one before it, its answer, and a new user message, so the
    engine's prefix cache can serve everything but the new message."""
    conversations: dict[int, list[dict]] = {}
    for req in requests:
        conversations.setdefault(req.conversation, []).append(
            {"prompt_tokens": req.prompt_tokens, "output_tokens": req.output_tokens,
             "think_s": req.think_s})
    path.write_text(json.dumps({"shared_prefix_tokens": shared_prefix_tokens, "salt": salt,
                                "conversations": list(conversations.values())}))
    return len(conversations)
