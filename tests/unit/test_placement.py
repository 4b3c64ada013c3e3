"""The engine and its load client kept on separate cores, and everything put back."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from workbench.mechanisms.placement import apart, group_threads, split_cores

TWO_CORES = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")


def test_the_spare_core_is_the_last_as_vllm_reserves_it() -> None:
    assert split_cores({0, 1}) == ({0}, {1})
    assert split_cores({0, 1, 2, 3}) == ({0, 1, 2}, {3})
    assert split_cores({5}) is None  # one core: nothing to split


def _group() -> subprocess.Popen[bytes]:
    """A process group like the engine's: a leader with a thread, and a child it forked."""
    code = ("import os, threading, time; threading.Thread(target=time.sleep, args=(30,), "
            "daemon=True).start(); os.fork() or time.sleep(30); time.sleep(30)")
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


@TWO_CORES
def test_apart_pins_every_thread_of_both_groups_and_restores_them() -> None:
    mine = os.sched_getaffinity(0)
    engine_cores, client_cores = split_cores(mine) or (set(), set())
    engine, client = _group(), _group()
    try:
        deadline = time.monotonic() + 20
        while len(group_threads(engine.pid)) < 3 or len(group_threads(client.pid)) < 3:
            assert time.monotonic() < deadline, "the stand-in groups did not start"
            time.sleep(0.05)  # the thread and the fork are up
        bound = group_threads(engine.pid)[-1]  # as vLLM binds a compute thread to a core
        os.sched_setaffinity(bound, {min(engine_cores)})
        before = {tid: os.sched_getaffinity(tid) for tid in group_threads(engine.pid)}
        with apart(engine.pid, client.pid) as placed:
            assert placed
            assert all(os.sched_getaffinity(t) == engine_cores for t in group_threads(engine.pid)
                       if t != bound)
            assert os.sched_getaffinity(bound) == {min(engine_cores)}  # its binding kept
            assert all(os.sched_getaffinity(t) == client_cores for t in group_threads(client.pid))
            assert os.sched_getaffinity(0) == client_cores  # this thread starts the sampler
        assert {tid: os.sched_getaffinity(tid) for tid in group_threads(engine.pid)} == before
        assert all(os.sched_getaffinity(t) == mine for t in group_threads(client.pid))
        assert os.sched_getaffinity(0) == mine
    finally:
        for proc in (engine, client):
            os.killpg(proc.pid, 9)
            proc.wait()


def test_nothing_is_placed_without_an_engine_process() -> None:
    mine = os.sched_getaffinity(0)
    with apart(None, None) as placed:  # an endpoint: its engine is not ours to place
        assert not placed and os.sched_getaffinity(0) == mine
