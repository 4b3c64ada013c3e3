"""One traffic request answered by a served model (issue 49): the request's own messages
and parameters, greedy unless it names a temperature, seeded either way so both models
are asked alike; the answer checked on its own (health, refusal, schema) by
scorers/answer_agreement.answer_checks. Its agreement with the baseline's answer is the
judge's (gate/traffic.py), which has both sides: the runner's score is 0 until then.

A prompt is never quoted (an engine error's body is withheld, as a safety suite's), and a
credential-shaped string in an answer (a model may repeat one from its prompt) is replaced
by its kind before the answer is kept anywhere (suites/traffic.py, redact_secrets).
"""

from __future__ import annotations

import math
import time
from typing import Any

import httpx

from workbench.mechanisms.errors import InfraError
from workbench.suites.definition import Suite, SuiteItem
from workbench.suites.engine_logprobs import chat_tokens, prompt_logprobs
from workbench.suites.results import ItemResult
from workbench.suites.scorers.answer_agreement import answer_checks
from workbench.suites.traffic import TrafficRequest, redact_secrets

__all__ = ["answer_likelihood", "ask_request", "request_body"]


def request_body(model: str, request: TrafficRequest, default_max_tokens: int, seed: int
                 ) -> dict[str, Any]:
    """The chat-completions body both models receive for one request. Tools are offered
    with tool_choice "none": the model sees them in its prompt and answers in text, which
    needs no tool-call parser in the engine, and a call it writes is compared as text."""
    body: dict[str, Any] = {
        "model": model, "messages": list(request.messages),
        "max_tokens": request.max_tokens or default_max_tokens,
        "temperature": float(request.temperature or 0.0), "seed": seed}
    if request.response_format is not None:
        body["response_format"] = request.response_format
    if request.tools:
        body["tools"] = list(request.tools)
        body["tool_choice"] = "none"
    return body


def _mean_logprob(positions: list[dict], ids: list[int], start: int) -> float | None:
    """The mean log-probability of ids[start:] as the engine scored them (positions: its
    prompt log-probabilities after the first token, each keyed by token id)."""
    values = []
    for at in range(start, len(ids)):
        entry = positions[at - 1] or {}
        scored = entry.get(str(ids[at]))  # JSON keys: token ids as text
        if scored is None:
            return None
        values.append(float(scored["logprob"]))
    return sum(values) / len(values) if values else None


async def answer_likelihood(client: httpx.AsyncClient, model: str, request: TrafficRequest,
                            answer: str, seed: int) -> float | None:
    """How likely this model finds `answer` to the request: the geometric mean of its
    tokens' probabilities (exp of the mean log-probability), 0..1, through the engine's own
    chat template and prompt log-probabilities; None for an empty answer, or where the
    template does not put the request's tokens before the answer's."""
    if not answer.strip():
        return None
    tools = list(request.tools) or None
    prompt = await chat_tokens(client, model, list(request.messages), tools)
    full = await chat_tokens(client, model, list(request.messages), tools, answer)
    if len(full) <= len(prompt) or full[:len(prompt)] != prompt:
        return None
    [positions] = await prompt_logprobs(client, model, [full], 1, seed)
    mean = _mean_logprob(positions, full, len(prompt))
    return None if mean is None else round(math.exp(mean), 6)


async def _answer(client: httpx.AsyncClient, body: dict[str, Any], suite: Suite,
                  item: SuiteItem) -> dict[str, Any]:
    resp = await client.post("/v1/chat/completions", json=body)
    if resp.status_code != 200:
        raise InfraError(f"engine answered HTTP {resp.status_code} for suite {suite.name} "
                         f"request {item.id} (body withheld: a team's own traffic)")
    return dict(resp.json())


async def _draw(client: httpx.AsyncClient, body: dict[str, Any], seed: int, suite: Suite,
                item: SuiteItem) -> tuple[str, bool, dict[str, Any]]:
    """One answer to the request drawn with `seed`: its text (credentials redacted),
    whether the engine cut it off, and the whole reply."""
    payload = await _answer(client, {**body, "seed": seed}, suite, item)
    choice = payload["choices"][0]
    return (redact_secrets(choice["message"].get("content") or ""),
            choice.get("finish_reason") == "length", payload)


def _checked_draws(item: SuiteItem, draws: list[tuple[str, bool]]
                   ) -> tuple[dict[str, float], str]:
    """Each check as the share of the draws that meet it (one draw: 0 or 1, as for any
    suite), and the first draw's health reason (the answer the record and the judge
    read)."""
    assert item.request is not None
    each = [answer_checks(text, item.prompt, item.request.schema, truncated=cut)
            for text, cut in draws]
    checks = {name: sum(c[name] for c, _ in each) / len(each) for name in each[0][0]}
    return checks, each[0][1]


async def ask_request(client: httpx.AsyncClient, model: str, suite: Suite, item: SuiteItem,
                      seed: int, reference: str | None = None) -> ItemResult:
    """One request answered, checked, and its reference answer's likelihood measured: the
    baseline's answer (`reference`, on the candidate's side), or this model's own (None).
    A sampled request is drawn its `n` times: on the baseline's side with the seeds
    seed .. seed + n - 1, and n times more with the seeds after those (its redraws); on the
    candidate's with the redraws' seeds. So a candidate is held to the baseline's draws as
    the baseline's redraws are (gate/traffic.py): sharing the baseline's own seeds would
    correlate its draws with the baseline's and favour it, and a candidate that is the
    baseline answers exactly as its redraws do. A greedy request is drawn once, whatever
    its n: every draw would be the same."""
    request = item.request
    assert request is not None  # a traffic suite's items carry their request
    n = request.n if request.sampled else 1
    first = seed + n if request.sampled and reference is not None else seed
    body = request_body(model, request, suite.spec.max_tokens, first)
    start = time.perf_counter()
    text, cut, payload = await _draw(client, body, first, suite, item)
    latency = time.perf_counter() - start
    draws = [(text, cut)] + [(t, c) for t, c, _ in [
        await _draw(client, body, first + k, suite, item) for k in range(1, n)]]
    redraws = [t for t, _, _ in [await _draw(client, body, seed + n + k, suite, item)
                                 for k in range(n)]] \
        if request.sampled and reference is None else []
    checks, health = _checked_draws(item, draws)
    if request.sampled:
        checks["sampled"] = 1.0
    likely = await _likelihood(client, model, suite, item, text if reference is None
                               else reference, seed)
    if likely is not None:
        checks["baseline_answer_likelihood"] = likely
    return ItemResult(id=item.id, slices=item.slices, prompt_sha256=request.digest,
                      response=text, score=0.0, latency_s=round(latency, 4),
                      completion_tokens=int(payload.get("usage", {}).get("completion_tokens",
                                                                         0)),
                      checks=checks, health=health,
                      redraw=redraws[0] if redraws else None,
                      draws=tuple(t for t, _ in draws[1:]), redraws=tuple(redraws[1:]))


async def _likelihood(client: httpx.AsyncClient, model: str, suite: Suite, item: SuiteItem,
                      answer: str, seed: int) -> float | None:
    """answer_likelihood of the reference answer, None where the engine cannot score it."""
    assert item.request is not None
    try:
        return await answer_likelihood(client, model, item.request, answer, seed)
    except httpx.HTTPStatusError as err:
        if err.response.status_code != 400:
            raise InfraError(f"engine answered HTTP {err.response.status_code} scoring suite "
                             f"{suite.name} request {item.id} (body withheld)") from err
        # an answer that fills the context, or a template that rewrites it: not scored,
        # on both sides alike (the same text through the same template)
        return None
