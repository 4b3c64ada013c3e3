"""Run a suite against a served, OpenAI-compatible endpoint and score it item by item.

Why not lm-eval here: its chat backend (local-chat-completions) records neither per-request
latency nor token counts, and this stage needs both per item. The client is a small
concurrent httpx loop so the engine batches requests; each finished item is appended to a
JSONL file at once, so a run that dies keeps what it measured.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from ..errors import InfraError
from .suites import Suite, SuiteItem

__all__ = [
    "SCORING_VERSION",
    "ItemResult",
    "SuiteResult",
    "run_suite",
    "score_response",
    "summarise",
]

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
# Part of the baseline cache key: bump whenever score_response changes meaning, so cached
# results scored the old way are not compared with new ones.
SCORING_VERSION = 2


@dataclass(frozen=True)
class ItemResult:
    id: str
    slices: tuple[str, ...]
    prompt_sha256: str
    response: str
    score: float
    latency_s: float
    completion_tokens: int


@dataclass(frozen=True)
class SuiteResult:
    suite: str
    version: str
    digest: str
    n: int
    accuracy: float
    slices: dict[str, dict[str, float]]  # slice -> {"n": ..., "accuracy": ...}
    items_file: str
    items: list[ItemResult] = field(repr=False)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SuiteResult:
        items = [ItemResult(**{**i, "slices": tuple(i["slices"])}) for i in data["items"]]
        return cls(**{**data, "items": items})


def score_response(scoring: str, response: str, answer: str) -> float:
    """1.0 when the response carries the answer, else 0.0.

    numeric: the final number in the response (so "7 + 5 = 12" counts as 12).
    """
    if scoring == "numeric":
        numbers = _NUMBER.findall(response.replace(",", ""))
        return float(bool(numbers) and float(numbers[-1]) == float(answer))
    return float(response.strip() == answer.strip())


def summarise(suite: Suite, items: list[ItemResult], items_file: Path) -> SuiteResult:
    by_slice: dict[str, list[float]] = defaultdict(list)
    for it in items:
        for s in it.slices:
            by_slice[s].append(it.score)
    slices = {s: {"n": len(v), "accuracy": sum(v) / len(v)} for s, v in sorted(by_slice.items())}
    return SuiteResult(
        suite=suite.name,
        version=suite.spec.version,
        digest=suite.digest,
        n=len(items),
        accuracy=sum(i.score for i in items) / len(items),
        slices=slices,
        items_file=str(items_file),
        items=sorted(items, key=lambda i: i.id),
    )


async def _ask(
    client: httpx.AsyncClient, model: str, suite: Suite, item: SuiteItem, seed: int
) -> ItemResult:
    messages = [{"role": "user", "content": item.prompt}]
    if suite.spec.system_prompt:
        messages.insert(0, {"role": "system", "content": suite.spec.system_prompt})
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": suite.spec.max_tokens,
        "temperature": 0.0,
        "seed": seed,
    }
    start = time.perf_counter()
    resp = await client.post("/v1/chat/completions", json=body)
    latency = time.perf_counter() - start
    if resp.status_code != 200:
        raise InfraError(f"engine answered HTTP {resp.status_code} for suite {suite.name} "
                         f"item {item.id}: {resp.text[:200]}")
    payload = resp.json()
    text = payload["choices"][0]["message"].get("content") or ""
    return ItemResult(
        id=item.id,
        slices=item.slices,
        prompt_sha256=hashlib.sha256(item.prompt.encode()).hexdigest(),
        response=text,
        score=score_response(suite.spec.scoring, text, item.answer),
        latency_s=round(latency, 4),
        completion_tokens=int(payload.get("usage", {}).get("completion_tokens", 0)),
    )


async def _run(
    base_url: str, model: str, suite: Suite, items: tuple[SuiteItem, ...], seed: int,
    concurrency: int, timeout_s: float, sink: Path, on_item: Callable[[], None],
) -> list[ItemResult]:
    gate = asyncio.Semaphore(concurrency)
    results: list[ItemResult] = []
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, limits=limits) as client:
        with sink.open("w") as out:

            async def one(item: SuiteItem) -> None:
                async with gate:
                    result = await _ask(client, model, suite, item, seed)
                out.write(json.dumps(asdict(result)) + "\n")
                out.flush()
                results.append(result)
                on_item()

            await asyncio.gather(*(one(it) for it in items))
    return results


def run_suite(
    base_url: str,
    model: str,
    suite: Suite,
    items: tuple[SuiteItem, ...],
    *,
    seed: int,
    sink: Path,
    concurrency: int = 8,
    timeout_s: float = 300,
    on_item: Callable[[], None] = lambda: None,
) -> SuiteResult:
    """Ask every item (greedy, seeded), score it, and return the per-item results."""
    try:
        results = asyncio.run(
            _run(base_url, model, suite, items, seed, concurrency, timeout_s, sink, on_item)
        )
    except httpx.HTTPError as err:
        raise InfraError(
            f"lost the engine during suite {suite.name} ({type(err).__name__}: {err}); "
            f"items finished so far are in {sink}"
        ) from err
    return summarise(suite, results, sink)
