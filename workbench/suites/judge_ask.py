"""The judge model asked over HTTP (issue 49, step 3): one OpenAI-compatible chat request
per order of each pair of answers, greedy, a few at a time. The judge's server is the
team's; a failed request is an infrastructure failure (exit 3), an unreadable reply is no
verdict (scorers/judge.py). No request or reply text is quoted in an error."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

import httpx

from workbench.config.judge import JudgeConfig
from workbench.mechanisms.errors import InfraError

__all__ = ["ask_judge"]


def _headers(judge: JudgeConfig) -> dict[str, str]:
    if judge.api_key_env is None:
        return {}
    key = os.environ.get(judge.api_key_env)
    if not key:
        raise InfraError(f"judge.api_key_env: {judge.api_key_env} is not set")
    return {"Authorization": f"Bearer {key}"}


async def _ask_all(judge: JudgeConfig, chats: Sequence[list[dict[str, str]]]) -> list[str]:
    gate = asyncio.Semaphore(judge.concurrency)
    async with httpx.AsyncClient(base_url=judge.url, timeout=judge.timeout_s,
                                 headers=_headers(judge)) as client:

        async def one(chat: list[dict[str, str]]) -> str:
            async with gate:
                resp = await client.post("/v1/chat/completions", json={
                    "model": judge.model, "messages": chat, "max_tokens": judge.max_tokens,
                    "temperature": 0.0})
            if resp.status_code != 200:
                raise InfraError(f"the judge at {judge.url} answered HTTP {resp.status_code} "
                                 "(body withheld: it may quote a request)")
            try:
                return str(resp.json()["choices"][0]["message"].get("content") or "")
            except (ValueError, KeyError, IndexError, TypeError):
                return ""  # not a chat completion: no verdict

        return list(await asyncio.gather(*(one(c) for c in chats)))


def ask_judge(judge: JudgeConfig, chats: Sequence[list[dict[str, str]]]) -> list[str]:
    """The judge's reply to each chat, in order."""
    try:
        return asyncio.run(_ask_all(judge, chats))
    except httpx.HTTPError as err:
        raise InfraError(f"the judge at {judge.url} could not be reached "
                         f"({type(err).__name__})") from err
