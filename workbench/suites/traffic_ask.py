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

import time
from typing import Any

import httpx

from workbench.mechanisms.errors import InfraError
from workbench.suites.definition import Suite, SuiteItem
from workbench.suites.results import ItemResult
from workbench.suites.scorers.answer_agreement import answer_checks
from workbench.suites.traffic import TrafficRequest, redact_secrets

__all__ = ["ask_request", "request_body"]


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


async def ask_request(client: httpx.AsyncClient, model: str, suite: Suite, item: SuiteItem,
                      seed: int) -> ItemResult:
    assert item.request is not None  # a traffic suite's items carry their request
    body = request_body(model, item.request, suite.spec.max_tokens, seed)
    start = time.perf_counter()
    resp = await client.post("/v1/chat/completions", json=body)
    latency = time.perf_counter() - start
    if resp.status_code != 200:
        raise InfraError(f"engine answered HTTP {resp.status_code} for suite {suite.name} "
                         f"request {item.id} (body withheld: a team's own traffic)")
    payload = resp.json()
    choice = payload["choices"][0]
    text = redact_secrets(choice["message"].get("content") or "")
    checks, health = answer_checks(text, item.prompt, item.request.schema,
                                   truncated=choice.get("finish_reason") == "length")
    if item.request.sampled:
        checks["sampled"] = 1.0
    return ItemResult(id=item.id, slices=item.slices, prompt_sha256=item.request.digest,
                      response=text, score=0.0, latency_s=round(latency, 4),
                      completion_tokens=int(payload.get("usage", {}).get("completion_tokens",
                                                                         0)),
                      checks=checks, health=health)
