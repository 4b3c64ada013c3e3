"""A multi-turn chat load: conversations, each turn sent once the previous answer has
arrived and the user has paused, every turn's prompt the conversation so far.

Executed with the engine environment's interpreter, by the load client's worker
(vllm_bench.py, when a job names `--conversations FILE`). `vllm bench serve` replays
requests whose arrival is fixed in advance; a conversation's next turn waits on the
answer before it, so this client sends the turns itself, through vLLM's own request
function (`async_request_openai_completions`): each turn's TTFT, inter-token gaps and
latency are measured exactly as the benchmark measures a request, and the results are
written in its `--save-detailed` form, one entry per turn, so the workbench reads them
as it reads any level (docs/load.md, "Conversations").

Prompts are token ids (the completions API takes them): a shared prefix, then per
conversation a first message, and per later turn the previous answer and a new user
message, each run of ids drawn from a generator seeded by (level salt, conversation, turn,
part), so a turn's prompt begins with the whole previous prompt and the engine's prefix
cache can serve it. The previous answer is written back as drawn ids of its length, not
the model's own tokens (which the completions stream does not return as ids): the cache
serves the earlier prompt, and an answer's own blocks are not reused.

Takes no part of the workbench: it imports only what the engine environment has.
"""

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

SKIPPED = "skipped: past --max-duration"  # vllm_bench.SKIPPED, read the same way
ABANDONED = "not sent: an earlier turn of its conversation failed"
PERCENTILES = (50, 95, 99)


def chat_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="multi-turn chat load (quant-workbench)")
    for name in ("--conversations", "--base-url", "--model", "--tokenizer", "--result-dir",
                 "--result-filename"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-concurrency", type=int, required=True)
    parser.add_argument("--max-duration", type=float, default=None)
    return parser.parse_args(argv)


def _ids(key: list[int], n: int, vocab: int) -> list[int]:
    """n token ids drawn from a generator seeded by key, clear of the vocabulary's ends
    (where special tokens sit)."""
    rng = np.random.default_rng(key)
    return rng.integers(100, max(vocab - 100, 101), size=max(n, 0)).tolist()


def prompts_of(spec: dict, vocab: int) -> list[list[list[int]]]:
    """Every conversation's turns' prompts, as token ids."""
    prefix = _ids([0, 0, 0, 0], spec["shared_prefix_tokens"], vocab)
    out = []
    for i, turns in enumerate(spec["conversations"]):
        salt = spec["salt"] + 1
        history = prefix + _ids([salt, i, 0, 0], turns[0]["prompt_tokens"] - len(prefix), vocab)
        prompts = [history]
        for k in range(1, len(turns)):
            before = turns[k - 1]
            user = turns[k]["prompt_tokens"] - before["prompt_tokens"] - before["output_tokens"]
            history = (history + _ids([salt, i, k, 1], before["output_tokens"], vocab)
                       + _ids([salt, i, k, 2], user, vocab))
            prompts.append(history)
        out.append(prompts)
    return out


async def _converse(turns: list[dict], prompts: list[list[int]], args: argparse.Namespace,
                    session: Any, gate: asyncio.Semaphore, deadline: float) -> list:
    from vllm.benchmarks.lib.endpoint_request_func import (
        RequestFuncInput,
        RequestFuncOutput,
        async_request_openai_completions,
    )

    results: list = []
    async with gate:  # a conversation holds its slot through its pauses: a user's session
        for k, (turn, prompt) in enumerate(zip(turns, prompts, strict=True)):
            if k and turn["think_s"]:
                await asyncio.sleep(turn["think_s"])
            if time.perf_counter() > deadline or (results and results[-1].error == SKIPPED):
                results.append(RequestFuncOutput(error=SKIPPED, prompt_len=len(prompt)))
            elif results and not results[-1].success:
                results.append(RequestFuncOutput(error=ABANDONED, prompt_len=len(prompt)))
            else:
                results.append(await async_request_openai_completions(RequestFuncInput(
                    prompt=prompt, api_url=args.base_url.rstrip("/") + "/v1/completions",
                    prompt_len=len(prompt), output_len=turn["output_tokens"],
                    model=args.model, ignore_eos=True), session))
    return results


async def _run(spec: dict, args: argparse.Namespace, vocab: int) -> list:
    import aiohttp

    prompts = prompts_of(spec, vocab)
    gate = asyncio.Semaphore(args.max_concurrency)
    deadline = time.perf_counter() + (args.max_duration or float("inf"))
    timeout = aiohttp.ClientTimeout(total=6 * 3600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        done = await asyncio.gather(*(
            _converse(turns, prompts[i], args, session, gate, deadline)
            for i, turns in enumerate(spec["conversations"])))
    return [out for conversation in done for out in conversation]


def _stats(values_s: list[float], name: str) -> dict:
    ms = np.asarray(values_s or [0.0], dtype=float) * 1000
    out = {f"mean_{name}_ms": float(ms.mean()), f"median_{name}_ms": float(np.median(ms)),
           f"std_{name}_ms": float(ms.std())}
    out.update({f"p{p}_{name}_ms": float(np.percentile(ms, p)) for p in PERCENTILES})
    return out


def detailed(outputs: list, turns: list[dict], concurrency: int) -> dict:
    """The benchmark's --save-detailed result for these turns."""
    ok = [(o, t) for o, t in zip(outputs, turns, strict=True) if o.success]
    starts = [o.start_time for o, _ in ok]
    duration = (max(o.start_time + o.latency for o, _ in ok) - min(starts)) if ok else 0.0
    out_tokens = [o.output_tokens or t["output_tokens"] for o, t in ok]
    tpots = [(o.latency - o.ttft) / (n - 1) for (o, _), n in zip(ok, out_tokens, strict=True)
             if n > 1]
    raw = {
        "backend": "openai", "max_concurrency": concurrency, "request_rate": "inf",
        "num_prompts": len(outputs), "duration": duration, "completed": len(ok),
        "failed": sum(1 for o in outputs if not o.success and o.error != SKIPPED),
        "total_input_tokens": sum(o.prompt_len for o, _ in ok),
        "total_output_tokens": sum(out_tokens),
        "request_throughput": len(ok) / duration if duration else 0.0,
        "output_throughput": sum(out_tokens) / duration if duration else 0.0,
        "input_lens": [o.prompt_len for o in outputs],
        "output_lens": [(o.output_tokens or t["output_tokens"]) if o.success else 0
                        for o, t in zip(outputs, turns, strict=True)],
        "ttfts": [o.ttft for o in outputs], "itls": [o.itl for o in outputs],
        "latencies": [o.latency for o in outputs],
        "start_times": [o.start_time for o in outputs],
        "errors": [o.error if not o.success else "" for o in outputs],
    }
    for name, values in (("ttft", [o.ttft for o, _ in ok]), ("tpot", tpots),
                         ("itl", [g for o, _ in ok for g in o.itl]),
                         ("e2el", [o.latency for o, _ in ok])):
        raw.update(_stats(values, name))
    return raw


def _vocab(tokenizer_dir: str) -> int:
    try:
        return int(json.loads((Path(tokenizer_dir) / "config.json").read_text())["vocab_size"])
    except (OSError, ValueError, KeyError):
        return 32000


def run(argv: list[str]) -> None:
    args = chat_args(argv)
    spec = json.loads(Path(args.conversations).read_text())
    outputs = asyncio.run(_run(spec, args, _vocab(args.tokenizer)))
    turns = [t for conversation in spec["conversations"] for t in conversation]
    raw = detailed(outputs, turns, args.max_concurrency)
    print(f"{raw['completed']} of {len(turns)} turns completed in {raw['duration']:.1f} s "
          f"({len(spec['conversations'])} conversations, {args.max_concurrency} at a time)")
    out = Path(args.result_dir) / args.result_filename
    out.write_text(json.dumps(raw))
