"""The load client of one engine session: vLLM's serving benchmark, kept running in one
process that takes each of the session's runs (warm-up, levels, the generator's ceiling)
in turn.

Importing the benchmark takes about 13 s on two cores; started once per session, beside
the suites, that import is paid once and off the load test's clock instead of once per
run (docs/load.md). Each run is still the command line `bench_args` builds, logged to its
own file; only the process is shared.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from workbench.mechanisms.errors import InfraError
from workbench.mechanisms.paths import engine_python, offline_env
from workbench.mechanisms.processes import spawn, stop_group

__all__ = ["BENCH_MODULE", "WATCH_INTERVAL_S", "LoadClient", "bench_env"]

BENCH_MODULE = "workbench.subprocesses.vllm_bench"
WATCH_INTERVAL_S = 5.0


def bench_env() -> dict[str, str]:
    # The benchmark seeds each prompt chunk from hash() of a string: a fixed hash seed makes
    # the prompts the same for the baseline and the candidate.
    return {**offline_env(), "PYTHONHASHSEED": "0"}


class LoadClient:
    """Context manager: the benchmark worker (`vllm_bench --worker`) for one session.

    A run that fails leaves the worker serving the next; a run abandoned (the watchdog
    fired, Ctrl-C) stops it, since its benchmark may still be sending."""

    def __init__(self, log_file: Path, command: list[str] | None = None) -> None:
        self.log_file = log_file
        self.command = command or [str(engine_python()), "-m", BENCH_MODULE, "--worker"]
        self.process: subprocess.Popen[bytes] | None = None
        self._pending = b""

    def start(self) -> LoadClient:
        if self.process is None:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            self.process = spawn(self.command, self.log_file, bench_env(), talk=True)
        return self

    def stop(self) -> None:
        if self.process is not None:
            if self.process.stdin is not None:
                self.process.stdin.close()
            stop_group(self.process, grace_s=2)
            self.process, self._pending = None, b""

    @property
    def pgid(self) -> int | None:
        """Its process group (spawn starts it as its own), while it runs."""
        return self.process.pid if self.process is not None else None

    def __enter__(self) -> LoadClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run(self, args: list[str], log_file: Path, raw_file: Path, what: str,
            watch: Callable[[], None] = lambda: None) -> dict:
        """One benchmark (`bench_args`), asking watch every WATCH_INTERVAL_S whether the
        engine is still serving; its raw results."""
        proc = self.start().process
        assert proc is not None and proc.stdin is not None
        try:
            proc.stdin.write((json.dumps({"argv": args, "log": str(log_file)}) + "\n").encode())
            proc.stdin.flush()
            reply = self._reply(proc, watch)
        except BaseException:
            self.stop()
            raise
        if reply["rc"] != 0 or not raw_file.exists():
            raise InfraError(f"load test {what} failed (exit {reply['rc']}: "
                             f"{reply['error'] or 'no results written'}); see {log_file}")
        return json.loads(raw_file.read_text())

    def _reply(self, proc: subprocess.Popen[bytes], watch: Callable[[], None]) -> dict:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()  # read raw: a buffered reader could hide a line from select
        next_watch = time.monotonic() + WATCH_INTERVAL_S
        while True:
            while b"\n" in self._pending:
                line, self._pending = self._pending.split(b"\n", 1)
                reply = json.loads(line)
                if "rc" in reply:  # not the worker's {"ready": true}
                    return reply
            if select.select([fd], [], [], 0.2)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise InfraError(f"the load client exited (code {proc.wait()}); "
                                     f"see {self.log_file}")
                self._pending += chunk
            if time.monotonic() >= next_watch:
                watch()
                next_watch = time.monotonic() + WATCH_INTERVAL_S
