"""The pieces of the fault model that need no engine: the load test's watchdog, the
engine log's root cause, sealed cache entries, run folders that never collide, and an
MLflow tracker that can lose its server without deciding the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.loadtest import bench as loadtest
from workbench.loadtest import client as client_module
from workbench.loadtest.bench import Watchdog
from workbench.loadtest.client import LoadClient
from workbench.mechanisms import cache_entry
from workbench.mechanisms.errors import InfraError


def _scrape(tokens: list[float]):
    def scrape() -> str:
        return ("# TYPE vllm:generation_tokens_total counter\n"
                f"vllm:generation_tokens_total {tokens[0]}\n")
    return scrape


def test_watchdog_calls_an_engine_that_stops_answering_hung() -> None:
    answers = iter([True, False, False, False])
    watch = Watchdog(lambda: None, lambda: next(answers), None, stall_s=300)
    watch()  # answered
    watch()
    watch()
    with pytest.raises(InfraError, match="engine hung"):
        watch()


def test_watchdog_resets_after_an_answer_and_calls_a_silent_generator_stalled(monkeypatch
                                                                             ) -> None:
    tokens = [10.0]
    now = [1000.0]
    monkeypatch.setattr(loadtest.time, "monotonic", lambda: now[0])
    watch = Watchdog(lambda: None, lambda: True, _scrape(tokens), stall_s=60)
    watch()
    now[0] += 30
    tokens[0] = 20.0
    watch()  # progress: the clock restarts
    now[0] += 50
    watch()  # no progress for 50 s < 60 s
    now[0] += 20
    with pytest.raises(InfraError, match="engine stalled: no output token generated for 70s"):
        watch()


def test_watchdog_reads_progress_from_a_levels_sampler_not_its_own_scrape(monkeypatch
                                                                          ) -> None:
    """While a level's telemetry sampler reads /metrics, the watchdog takes the output
    token count from it: one reader of /metrics, not two."""
    now, counts, scraped = [1000.0], [5.0], []
    monkeypatch.setattr(loadtest.time, "monotonic", lambda: now[0])
    watch = Watchdog(lambda: None, lambda: True, lambda: scraped.append(1) or "", stall_s=60)
    watch.reset(lambda: counts[0])
    watch()
    now[0] += 50
    counts[0] = 9.0
    watch()  # progress, seen through the sampler
    now[0] += 61
    with pytest.raises(InfraError, match="engine stalled"):
        watch()
    assert scraped == []


def test_watchdog_passes_on_a_dead_engine_as_dead() -> None:
    def dead() -> None:
        raise InfraError("engine died (exit code -9)")

    with pytest.raises(InfraError, match="engine died"):
        Watchdog(dead, lambda: True, None, stall_s=60)()


def test_the_load_client_is_stopped_when_the_watchdog_fires(tmp_path: Path) -> None:
    """A run abandoned by the watchdog stops the client: it never outlives the call."""
    script = "import sys, time; sys.stdin.readline(); time.sleep(60)  # wb-hung-client"
    calls = []

    def watch() -> None:
        calls.append(time.monotonic())
        raise InfraError("engine hung: test")

    client_module.WATCH_INTERVAL_S, saved = 0.5, client_module.WATCH_INTERVAL_S
    try:
        started = time.monotonic()
        with LoadClient(tmp_path / "client.log", [sys.executable, "-c", script]) as client, \
                pytest.raises(InfraError, match="engine hung"):
            client.run(["--x"], tmp_path / "log", tmp_path / "raw.json", "x", watch)
        assert time.monotonic() - started < 10 and len(calls) == 1
    finally:
        client_module.WATCH_INTERVAL_S = saved
    out = subprocess.run(["pgrep", "-f", "wb-hung-client"], capture_output=True, text=True)
    assert out.stdout.strip() == ""


# a stand-in for the benchmark worker's protocol: "ready", then per job one reply line;
# the job's arguments say what it does (write results, fail, or die)
WORKER = """
import json, os, sys
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    job = json.loads(line)
    what, raw = job["argv"]
    if what == "die":
        os._exit(7)
    if what == "ok":
        open(raw, "w").write(json.dumps({"pid": os.getpid()}))
    print(json.dumps({"rc": 0 if what == "ok" else 1, "error": "" if what == "ok" else "bad"}),
          flush=True)
"""


def test_one_load_client_takes_a_session_s_runs_in_turn(tmp_path: Path) -> None:
    """Every run of a session goes to the same process; a failed run is named with its
    log and the client goes on; a client that dies is an infrastructure error."""
    with LoadClient(tmp_path / "client.log", [sys.executable, "-c", WORKER]) as client:
        pids = {client.run(["ok", str(tmp_path / f"r{i}.json")], tmp_path / f"{i}.log",
                           tmp_path / f"r{i}.json", f"run {i}")["pid"] for i in range(3)}
        assert len(pids) == 1
        with pytest.raises(InfraError, match=r"load test at c4 failed \(exit 1: bad\); see "):
            client.run(["fail", "-"], tmp_path / "f.log", tmp_path / "none.json", "at c4")
        assert client.run(["ok", str(tmp_path / "r9.json")], tmp_path / "9.log",
                          tmp_path / "r9.json", "again")["pid"] in pids
        with pytest.raises(InfraError, match="the load client exited"):
            client.run(["die", "-"], tmp_path / "d.log", tmp_path / "none.json", "dies")


def test_root_cause_skips_the_wrapper_that_points_elsewhere() -> None:
    from workbench.serve.engine import root_cause

    log = ("INFO starting\n(EngineCore pid=9) ValueError: 1.41 GiB KV cache is needed, which "
           "is larger than the available KV cache memory (0.50 GiB)\n"
           "RuntimeError: Engine core initialization failed. See root cause above.\n")
    assert root_cause(log).startswith("ValueError: 1.41 GiB KV cache is needed")
    assert root_cause("all fine\n") is None


def _entry(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "measurement.json").write_text(json.dumps({"a": 1}))
    (src / "sub" / "logprobs.jsonl").write_text('{"x": 1}\n{"x": 2}\n')
    dest = tmp_path / "cache" / "entry"
    dest.parent.mkdir()
    cache_entry.store(src, dest)
    return dest


def test_a_sealed_entry_checks_and_any_damage_is_named(tmp_path: Path) -> None:
    dest = _entry(tmp_path)
    assert cache_entry.check(dest) is None
    lp = dest / "sub" / "logprobs.jsonl"
    lp.write_text('{"x": 1}\n')  # cut at a line break: still valid JSONL
    assert "logprobs.jsonl" in cache_entry.check(dest)
    lp.write_text('{"x": 1}\n{"x": 3}\n')  # same size, other content
    assert "content differs" in cache_entry.check(dest)
    lp.unlink()
    assert "missing" in cache_entry.check(dest)
    (dest / cache_entry.SEAL).unlink()
    assert "no digest list" in cache_entry.check(dest)


def test_staging_folders_are_unique_and_swept_when_their_process_is_gone(tmp_path: Path
                                                                         ) -> None:
    final = tmp_path / "entry"
    a, b = cache_entry.staging_for(final), cache_entry.staging_for(final)
    assert a != b and str(os.getpid()) in a.name
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = final.with_name(f"entry{cache_entry.STAGING}{dead.pid}-abcd1234")
    orphan.mkdir()
    a.mkdir()
    removed = cache_entry.sweep_staging(tmp_path)
    assert removed == [orphan] and a.exists()


def test_a_second_writer_keeps_a_sound_entry(tmp_path: Path) -> None:
    dest = _entry(tmp_path)
    before = (dest / cache_entry.SEAL).read_text()
    src = tmp_path / "other"
    src.mkdir()
    (src / "measurement.json").write_text("{}")
    cache_entry.store(src, dest)
    assert (dest / cache_entry.SEAL).read_text() == before
    assert not list(dest.parent.glob(f"*{cache_entry.STAGING}*"))


def test_run_folders_started_in_the_same_second_do_not_collide(tmp_path: Path) -> None:
    from workbench.pipeline.evaluate import new_run_dir

    folders = {new_run_dir(tmp_path, "int4") for _ in range(3)}
    assert len(folders) == 3 and all(f.parent == tmp_path for f in folders)


def test_a_tracker_whose_server_is_gone_reports_instead_of_raising(tmp_path: Path,
                                                                   monkeypatch) -> None:
    from workbench.config.run_config import TrackingConfig
    from workbench.tracking.tracker import Tracker

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    heard = []
    started = time.monotonic()
    with Tracker(TrackingConfig(), "x", {}, on_lost=heard.append) as tracker:
        tracker.log_metrics({"a": 1.0})
        tracker.log_artifacts(tmp_path)
    assert time.monotonic() - started < 60
    assert len(heard) == 1  # said once
    status = tracker.status()
    assert status["status"] == "incomplete" and "log_metrics" in status["not_logged"]


def test_a_run_left_running_by_a_killed_workbench_is_marked_by_the_next(tmp_path: Path
                                                                       ) -> None:
    import mlflow

    from workbench.config.run_config import TrackingConfig
    from workbench.tracking.tracker import Tracker

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cfg = TrackingConfig(experiment="stale")
    with Tracker(cfg, "first", {}) as first:
        pass
    client = mlflow.MlflowClient()
    client.set_tag(first.run_id, "workbench.pid", str(dead.pid))
    client.update_run(first.run_id, "RUNNING")
    with Tracker(cfg, "second", {}) as second:
        pass
    assert second.marked_stale == [first.run_id]
    assert client.get_run(first.run_id).info.status == "KILLED"
    assert "ended without closing" in client.get_run(first.run_id).data.tags["failure"]


def test_a_full_disk_names_the_stage_and_the_path(tmp_path: Path) -> None:
    """/dev/full answers every write with ENOSPC, as a full disk does."""
    from workbench.pipeline.evaluate import stage

    with pytest.raises(InfraError, match=r"measure: cannot write in .*: No space left"):
        with stage("measure", tmp_path):
            with open("/dev/full", "w") as f:
                f.write("x" * 10)
                f.flush()
