"""Child processes the workbench starts (engine, quantiser, load client) and how they end.

Each child runs in its own process group and is set to die with the workbench, so that
stopping it stops everything it forked and not even a SIGKILLed workbench leaves one
running; SIGTERM unwinds like Ctrl-C so every context manager stops what it started.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["HELD_SIGNALS", "Terminated", "free_port", "group_pids", "install_sigterm_as_interrupt",
           "pid_alive", "popen_holding_signals", "signal_group", "spawn", "stop_group"]


_LOWEST_PORT = 10000


def _ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands out for bind(('', 0)) and outgoing connections."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A loopback port that is free now, for a server a child will bind seconds later.

    Chosen at random below the kernel's ephemeral range: a port the kernel picked for us
    (bind to port 0) is released before the child binds it, and the kernel hands the same
    range to every other bind(0) on the machine (vLLM picks its internal ZMQ and
    torch.distributed ports that way), so two runs at once took each other's API port
    ("Address already in use", measured: a sweep beside the integration tests). Outside
    that range only another random pick can collide; the engine retries on a new port
    then (serve/engine.py)."""
    low, _ = _ephemeral_range()
    rng = random.SystemRandom()
    for _ in range(64):
        port = rng.randrange(_LOWEST_PORT, max(low, _LOWEST_PORT + 1000))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a crowded range: let the kernel choose
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])



def spawn(cmd: list[str], log_file: Path, env: dict[str, str], talk: bool = False
          ) -> subprocess.Popen[bytes]:
    """Start a child of the workbench (engine, quantiser worker, load client): in its own
    process group, so that stopping it stops everything it forked, and set to die with the
    workbench, so that not even a SIGKILLed workbench leaves it running.

    talk: the child's stdin and stdout are pipes to the workbench (its stderr alone goes
    to the log), for a child that takes jobs and answers them."""
    pipe = subprocess.PIPE if talk else None
    with log_file.open("wb") as log:
        return popen_holding_signals(cmd, die_with_parent, stdin=pipe, stdout=pipe or log,
                                     stderr=log if talk else subprocess.STDOUT, env=env,
                                     start_new_session=True)


# Ctrl-C and SIGTERM, the two signals the workbench unwinds on.
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def popen_holding_signals(cmd: list[str], child_setup: Callable[[], None], **kwargs: Any
                          ) -> subprocess.Popen:
    """subprocess.Popen(preexec_fn=child_setup) with Ctrl-C and SIGTERM held while it forks.

    A preexec_fn makes CPython run the at-fork handlers libraries register (filelock
    registers some), and a KeyboardInterrupt raised inside one is only printed ("Exception
    ignored in ...") and lost, leaving that library's state half-changed: a sweep
    interrupted just as an engine started ran on past the signal. Held, the signal is
    raised right after the fork, here, where the child just started is stopped with it.
    The child lets both signals through again before it executes the command. The child
    must lead its own process group (start_new_session or child_setup's setsid)."""
    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)
        child_setup()

    proc: subprocess.Popen | None = None
    held = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        proc = subprocess.Popen(cmd, preexec_fn=setup, **kwargs)
    finally:
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a held signal is raised here
        except BaseException:
            if proc is not None:
                stop_group(proc, grace_s=2)
            raise
    return proc



def group_pids(pgid: int) -> list[int]:
    """Every process in a process group, from /proc (a spawned child leads its own: the
    engine's API server, its engine core and the worker it forks)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if os.getpgid(int(entry.name)) == pgid:
                found.append(int(entry.name))
        except (ProcessLookupError, PermissionError):
            continue  # ended meanwhile, or not ours to read
    return found


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 5) -> None:
    """SIGTERM a spawned child's process group, then SIGKILL whatever outlives the grace."""
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    signal_group(proc.pid, signal.SIGKILL)
    proc.wait()



def die_with_parent() -> None:
    """In the engine's child process: ask Linux to SIGTERM it when the workbench dies.

    Context managers cover every exit Python sees; this covers the one it cannot (the
    workbench killed with SIGKILL), which would otherwise orphan the engine.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)



def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (on this host)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True



def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass



class Terminated(KeyboardInterrupt):
    """SIGTERM, unwinding like Ctrl-C; the CLI exits 128 + signum (143), as a shell does."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum



def install_sigterm_as_interrupt() -> None:
    """Make SIGTERM unwind like Ctrl-C, so every context manager stops its engine."""

    def handler(signum: int, _frame: object) -> None:
        raise Terminated(signum)

    if sys.platform != "win32":
        signal.signal(signal.SIGTERM, handler)
