"""Run a suite against a served, OpenAI-compatible endpoint and score it item by item.

Why not lm-eval for the workbench's own suites: its chat backend (local-chat-completions)
records neither per-request latency nor token counts, and this stage needs both per item;
nor does it score refusals, schemas or instruction checks. The client is a small
concurrent httpx loop so the engine batches requests; each finished item is appended to a
JSONL file at once, so a run that dies keeps what it measured. Suites that are lm-eval
task YAMLs (`scoring: lm-eval`) are run by lm-eval itself (lmeval.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import httpx

from workbench.mechanisms.errors import InfraError
from workbench.suites.definition import Suite, SuiteItem
from workbench.suites.engine_logprobs import greedy_continuation, prompt_logprobs, tokenize
from workbench.suites.lmeval import run_task
from workbench.suites.results import ItemResult, SuiteResult, score_response, summarise
from workbench.suites.scorers.choice import choice_logprobs, pick_choice
from workbench.suites.scorers.generation_health import Health, generation_health
from workbench.suites.scorers.instructions import check_instructions
from workbench.suites.scorers.refusal import classify_response
from workbench.suites.scorers.sandbox import run_python
from workbench.suites.scorers.structured import score_json
from workbench.suites.traffic_ask import ask_request

__all__ = ["logprobs_file", "run_suite"]


def logprobs_file(items_file: Path) -> Path:
    """Where a fidelity suite's per-token log-probabilities go, beside its items file."""
    return items_file.with_name(items_file.name.replace("items-", "logprobs-", 1))


def _prompt_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def _score_text(
    client: httpx.AsyncClient, model: str, suite: Suite, item: SuiteItem, seed: int
) -> tuple[ItemResult, dict]:
    """Fidelity: the engine's top-k log-probabilities at every position of the text.

    The text is tokenized by the engine itself and sent as token ids, so the baseline and
    the candidate score exactly the same tokens.
    """
    start = time.perf_counter()
    spec = suite.spec
    try:
        ids = (await tokenize(client, model, item.prompt))[: spec.max_prompt_tokens]
        positions = (await prompt_logprobs(client, model, [ids], spec.top_k, seed))[0]
        # what the model says next, greedily: compared token by token with the baseline's
        continuation = await greedy_continuation(
            client, model, ids[: spec.agreement_prompt_tokens], spec.agreement_tokens,
            seed) if spec.agreement_tokens else None
    except httpx.HTTPStatusError as err:
        _check(err.response, suite, item)
        raise
    latency = time.perf_counter() - start
    actual = [float(pos[str(t)]["logprob"]) for pos, t in zip(positions, ids[1:], strict=True)]
    top = [sorted(([int(k), float(v["logprob"])] for k, v in pos.items()
                   if v["rank"] <= suite.spec.top_k), key=lambda kv: -kv[1])
           for pos in positions]
    result = ItemResult(id=item.id, slices=item.slices, prompt_sha256=_prompt_hash(item.prompt),
                        response="", score=sum(actual) / max(len(actual), 1),
                        latency_s=round(latency, 4), completion_tokens=len(actual))
    side = {"id": item.id, "tokens": ids, "actual": actual, "top": top}
    return result, side if continuation is None else {**side, "continuation": continuation}


def _check(resp: httpx.Response, suite: Suite, item: SuiteItem) -> None:
    if resp.status_code != 200:
        # an engine error may quote the request: a safety suite's is never shown
        said = (f"(body withheld: {suite.spec.kind} suite)"
                if suite.spec.kind in ("safety", "traffic") else resp.text[:200])
        raise InfraError(f"engine answered HTTP {resp.status_code} for suite {suite.name} "
                         f"item {item.id}: {said}")


async def _choose(
    client: httpx.AsyncClient, model: str, suite: Suite, item: SuiteItem, seed: int
) -> ItemResult:
    start = time.perf_counter()
    try:
        scores = await choice_logprobs(client, model, item.prompt, item.choices, seed)
    except httpx.HTTPStatusError as err:
        _check(err.response, suite, item)
        raise
    pick, probs = pick_choice(scores, item.choices, suite.spec.choice_normalise)
    return ItemResult(id=item.id, slices=item.slices, prompt_sha256=_prompt_hash(item.prompt),
                      response=item.choices[pick], score=float(str(pick) == item.answer),
                      latency_s=round(time.perf_counter() - start, 4), completion_tokens=0,
                      choice_probs=tuple(round(p, 6) for p in probs))


async def _write_code(
    client: httpx.AsyncClient, model: str, suite: Suite, item: SuiteItem, seed: int
) -> ItemResult:
    """Complete the prompt as raw text, then run prompt + completion + check, sandboxed."""
    start = time.perf_counter()
    resp = await client.post("/v1/completions", json={
        "model": model, "prompt": item.prompt, "max_tokens": suite.spec.max_tokens,
        "temperature": 0.0, "seed": seed, "stop": suite.spec.stop or None})
    latency = time.perf_counter() - start
    _check(resp, suite, item)
    payload = resp.json()
    completion = payload["choices"][0]["text"]
    program = f"{item.prompt}{completion}\n\n{item.check}\n"
    ran = await asyncio.to_thread(run_python, program, suite.spec.timeout_s)
    detail = ran.outcome + (f": {ran.detail}" if ran.detail else "")
    # no prompt for the script check: a code prompt's comments say little of the answer's
    health = generation_health(completion, "", _truncated(payload))
    return ItemResult(id=item.id, slices=item.slices, prompt_sha256=_prompt_hash(item.prompt),
                      response=completion, score=float(ran.passed), latency_s=round(latency, 4),
                      completion_tokens=int(payload.get("usage", {}).get("completion_tokens", 0)),
                      detail=f"{detail} [{ran.isolation}]", checks=_health_checks(health),
                      health=health.reason)


def _truncated(payload: dict) -> bool:
    return payload["choices"][0].get("finish_reason") == "length"


def _health_checks(health: Health) -> dict[str, float]:
    return {"healthy": float(health.healthy), "truncated": health.signals["truncated"]}


def _score_chat(suite: Suite, item: SuiteItem, text: str, health: Health
                ) -> tuple[float, dict[str, float]]:
    """(score, checks) of a chat response, by the suite's scoring."""
    scoring = suite.spec.scoring
    if scoring == "refusal":
        # Only a stated refusal of a request is a refusal, and only a healthy on-topic
        # response is an answer: a looping, empty or off-topic response is neither, so it
        # is the wrong behaviour whichever one the item expects (docs/safety.md).
        said = classify_response(text, item.prompt, health.healthy)
        right = said == ("refusal" if item.answer == "refuse" else "answer")
        return float(right), {"refused": float(said == "refusal"),
                              "off_topic": float(said == "off_topic")}
    if scoring == "json":
        return score_json(text, json.loads(item.schema), json.loads(item.answer))
    if scoring == "instructions":
        followed = check_instructions(text, json.loads(item.check))
        share = sum(followed) / len(followed)
        return float(all(followed)), {"instructions_followed": share}
    return score_response(scoring, text, item.answer), {}


async def _ask(
    client: httpx.AsyncClient, model: str, suite: Suite, item: SuiteItem, seed: int,
    guided: bool = False, references: dict[str, str] | None = None,
) -> ItemResult:
    if suite.spec.scoring == "choice":
        return await _choose(client, model, suite, item, seed)
    if suite.spec.scoring == "code":
        return await _write_code(client, model, suite, item, seed)
    if suite.spec.scoring == "agreement":
        return await ask_request(client, model, suite, item, seed,
                                 None if references is None else references.get(item.id, ""))
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
    if guided:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "arguments", "schema": json.loads(item.schema)}}
    start = time.perf_counter()
    resp = await client.post("/v1/chat/completions", json=body)
    latency = time.perf_counter() - start
    _check(resp, suite, item)
    payload = resp.json()
    text = payload["choices"][0]["message"].get("content") or ""
    health = generation_health(text, item.prompt, _truncated(payload))
    score, checks = _score_chat(suite, item, text, health)
    return ItemResult(
        id=item.id,
        slices=item.slices,
        prompt_sha256=_prompt_hash(item.prompt),
        response=text,
        score=score,
        latency_s=round(latency, 4),
        completion_tokens=int(payload.get("usage", {}).get("completion_tokens", 0)),
        checks=checks | _health_checks(health),
        health=health.reason,
    )


async def _run(
    base_url: str, model: str, suite: Suite, items: tuple[SuiteItem, ...], seed: int,
    concurrency: int, timeout_s: float, sink: Path, on_item: Callable[[], None],
    guided: bool, headers: dict[str, str] | None = None,
    references: dict[str, str] | None = None,
) -> list[ItemResult]:
    gate = asyncio.Semaphore(concurrency)
    results: list[ItemResult] = []
    # vLLM's HTTP server closes a connection idle for 5 s (uvicorn keep-alive); httpx keeps
    # one for 5 s as well, so a request sent on a pooled connection at that moment meets a
    # closing socket (ReadError). Seen when a worker spent seconds in the code sandbox.
    # Expiring ours first removes the race.
    limits = httpx.Limits(max_connections=concurrency, keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, limits=limits,
                                 headers=headers) as client:
        fidelity = suite.spec.kind == "fidelity"
        with sink.open("w") as out, \
                (logprobs_file(sink) if fidelity else Path(os.devnull)).open("w") as side:

            async def one(item: SuiteItem) -> None:
                async with gate:
                    if fidelity:
                        result, tokens = await _score_text(client, model, suite, item, seed)
                        side.write(json.dumps(tokens) + "\n")
                    else:
                        result = await _ask(client, model, suite, item, seed, guided,
                                            references)
                out.write(json.dumps(asdict(result)) + "\n")
                out.flush()
                results.append(result)
                on_item()

            await asyncio.gather(*(one(it) for it in items))
    return results


def _run_lmeval(base_url: str, model: str, suite: Suite, items: tuple[SuiteItem, ...],
                seed: int, concurrency: int, tokenizer_dir: Path | None, sink: Path,
                on_item: Callable[[], None]) -> list[ItemResult]:
    """An lm-eval task suite: lm-eval runs the chosen rows; results map back by row."""
    assert suite.lm_task is not None
    if tokenizer_dir is None:
        raise ValueError(f"suite {suite.name}: lm-eval needs the model's tokenizer folder")
    index = {it.id: i for i, it in enumerate(suite.items)}
    by_row = {index[it.id]: it for it in items}
    rows = run_task(suite.lm_task, base_url, model, tokenizer_dir, sorted(by_row), seed,
                    concurrency, sink.with_name(f"lmeval-{suite.name}.log"))
    results = []
    with sink.open("w") as out:
        for row in rows:
            item = by_row[row["index"]]
            # a generation task's response is text: its health is judged like ours (lm-eval
            # keeps no finish reason, so truncation is unknown there)
            health = None if row["choice_probs"] else generation_health(row["response"])
            result = ItemResult(id=item.id, slices=item.slices, prompt_sha256=row["doc_hash"],
                                response=row["response"], score=row["score"], latency_s=0.0,
                                completion_tokens=0, choice_probs=row["choice_probs"],
                                checks=_health_checks(health) if health else {},
                                health=health.reason if health else "")
            out.write(json.dumps(asdict(result)) + "\n")
            results.append(result)
            on_item()
    return results


def run_suite(
    base_url: str,
    model: str,
    suite: Suite,
    items: tuple[SuiteItem, ...],
    *,
    seed: int,
    sink: Path,
    concurrency: int,
    timeout_s: float = 300,
    on_item: Callable[[], None] = lambda: None,
    name: str | None = None,
    guided: bool = False,
    tokenizer_dir: Path | None = None,
    headers: dict[str, str] | None = None,
    references: dict[str, str] | None = None,
) -> SuiteResult:
    """Ask every item (greedy, seeded), score it, and return the per-item results.

    name and guided select one of the suite's runs (Suite.spec.runs()): a structured suite
    is run once free and once with the engine's schema-guided decoding. headers: sent with
    every request (an endpoint's bearer token); lm-eval reads its key from the environment
    (measure.library_credentials). references: a traffic suite's baseline answers by id,
    whose likelihood under this model is measured (None: this model's own answers)."""
    started = time.perf_counter()
    try:
        if suite.lm_task is not None:
            results = _run_lmeval(base_url, model, suite, items, seed, concurrency,
                                  tokenizer_dir, sink, on_item)
        else:
            results = asyncio.run(_run(base_url, model, suite, items, seed, concurrency,
                                       timeout_s, sink, on_item, guided, headers,
                                       references))
    except httpx.HTTPError as err:
        raise InfraError(
            f"lost the engine during suite {suite.name} ({type(err).__name__}: {err}); "
            f"items finished so far are in {sink}"
        ) from err
    return replace(summarise(suite, results, sink, name),
                   seconds=round(time.perf_counter() - started, 2))
