"""A zero-work OpenAI completions endpoint: the load generator's ceiling is measured on it.

Executed with the engine environment's interpreter (``python -m
workbench.subprocesses.zero_work_server PORT``), where aiohttp is installed with vLLM. It
answers a streamed completion with as many one-token chunks as max_tokens asks for, and the
usage summary the benchmark reads, without computing anything; so `vllm bench serve` against
it measures only what the client and the HTTP hop can carry. Not a model stand-in: nothing
here is used to evaluate anything.
"""

import json
import sys

from aiohttp import web

CHUNK = ("data: " + json.dumps({"object": "text_completion",
                                "choices": [{"index": 0, "text": " x", "finish_reason": None}]})
         + "\n\n").encode()


async def completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    tokens = int(body.get("max_tokens") or 16)
    prompt = body.get("prompt")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(tokens):
        await response.write(CHUNK)
    usage = {"prompt_tokens": len(prompt) if isinstance(prompt, list) else 1,
             "completion_tokens": tokens, "total_tokens": tokens}
    await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    return response


async def health(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


if __name__ == "__main__":
    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
