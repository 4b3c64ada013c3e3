"""The engine's tokenizer and prompt log-probabilities, as two small requests.

Shared by the fidelity suites (top-k at every position of a text) and the multiple-choice
suites (the log-probability of each continuation token). Both send token ids, not text, so
that what is scored is exactly the tokenization the engine itself made. Errors surface as
httpx.HTTPStatusError; the runner turns them into infrastructure errors naming the item.
"""

from __future__ import annotations

import httpx

__all__ = ["chat_tokens", "greedy_continuation", "prompt_logprobs", "tokenize"]


async def tokenize(client: httpx.AsyncClient, model: str, text: str,
                   special: bool = True) -> list[int]:
    resp = await client.post("/tokenize", json={"model": model, "prompt": text,
                                                "add_special_tokens": special})
    resp.raise_for_status()
    return list(resp.json()["tokens"])


async def chat_tokens(client: httpx.AsyncClient, model: str, messages: list[dict],
                      tools: list[dict] | None, answer: str | None = None) -> list[int]:
    """A chat as the engine's own chat template tokenises it: up to the assistant's turn
    (answer None), or with `answer` as the assistant's turn, continued rather than closed
    (so that its tokens end where the answer ends)."""
    body: dict = {"model": model, "messages": list(messages),
                  "add_generation_prompt": answer is None, "add_special_tokens": False}
    if answer is not None:
        body["messages"] = [*messages, {"role": "assistant", "content": answer}]
        body["continue_final_message"] = True
    if tools:
        body["tools"] = tools
    resp = await client.post("/tokenize", json=body)
    resp.raise_for_status()
    return list(resp.json()["tokens"])


async def prompt_logprobs(client: httpx.AsyncClient, model: str, prompts: list[list[int]],
                          top_k: int, seed: int) -> list[list[dict]]:
    """Per prompt, per position after the first: {token_id: {"logprob", "rank", ...}}, the
    actual token and the top-k. One batched request; one generated token, ignored."""
    resp = await client.post("/v1/completions", json={
        "model": model, "prompt": prompts, "max_tokens": 1, "temperature": 0.0, "seed": seed,
        "prompt_logprobs": top_k})
    resp.raise_for_status()
    by_index = sorted(resp.json()["choices"], key=lambda c: c["index"])
    return [choice["prompt_logprobs"][1:] for choice in by_index]  # the first has no context


async def greedy_continuation(client: httpx.AsyncClient, model: str, prompt: list[int],
                              max_tokens: int, seed: int) -> list[int]:
    """The token ids the model generates greedily after a prompt of token ids (it may
    stop early at its end-of-sequence token, which is then the last id)."""
    resp = await client.post("/v1/completions", json={
        "model": model, "prompt": [prompt], "max_tokens": max_tokens, "temperature": 0.0,
        "seed": seed, "return_token_ids": True})
    resp.raise_for_status()
    return list(resp.json()["choices"][0]["token_ids"])
