"""The load generator's other modes through the real engine: Poisson-like arrivals at a
rate with a duration bound, and a timed trace replayed faster. (A closed-loop sweep of
levels, with both boundaries, the SLO, the generator's ceiling and memory headroom, is
checked on test_pipeline's run; FP8 KV capacity on test_quantize_formats'.)"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


# slow: the open-loop modes on their own engine (about 80 s); the closed loop every run
# uses is checked on test_pipeline's, and the arrival schedules in the unit tier.
@pytest.mark.slow
def test_arrival_rate_and_trace_replay_with_a_duration_bound(tiny_model: Path,
                                                             tmp_path: Path) -> None:
    from workbench.config.run_config import EngineConfig, LoadProfile
    from workbench.loadtest.bench import level_requests, run_load_test
    from workbench.serve.engine import EngineServer

    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(f'{{"arrival_s": {0.25 * i}, "prompt_tokens": {20 + i}, '
                             f'"output_tokens": 8}}\n' for i in range(12)))
    rate = LoadProfile(request_rate=[4.0], burstiness=0.5, num_prompts=12, max_duration_s=1.5,
                       prompt_tokens={"distribution": "uniform", "min": 16, "max": 48},
                       output_tokens=8, warmup_prompts=1)
    replay = LoadProfile(trace=str(trace), replay_speed=[2.0], warmup_prompts=0)
    engine = EngineConfig(max_model_len=512, enforce_eager=True, kv_cache_space_gib=1)
    with EngineServer(tiny_model, "tiny", engine, tmp_path / "server.log") as server:
        results = {name: run_load_test(
            server.base_url, "tiny", tiny_model, prof, tmp_path / name,
            level_requests(prof, Path(prof.trace) if prof.trace else None, 512), name=name,
            scrape=server.metrics, ceiling=False) for name, prof in
            (("rate", rate), ("replay", replay))}
    lv = results["rate"].levels[0]
    assert lv.label == "r4" and lv.request_rate == 4.0
    # 12 arrivals at 4/s span ~3 s; the 1.5 s bound leaves the later ones unsent
    assert lv.skipped > 0 and lv.completed + lv.skipped == 12 and lv.failed == 0
    assert lv.server["latency"]["e2el_ms"]["count"] == lv.completed
    lv = results["replay"].levels[0]
    assert lv.label == "x2" and lv.completed == 12
    # 12 arrivals 0.25 s apart, replayed twice as fast: the level lasts at least 1.375 s
    assert lv.duration_s >= 11 * 0.25 / 2
    raw = json.loads(Path(lv.raw_file).read_text())
    assert raw["input_lens"] == [20 + i for i in range(12)]  # the trace's own lengths


def _search_sized_by(alone, shape: dict):
    """The capacity search's profile sized by what this machine's engine does with one
    request at a time, not by constants tuned on one machine (a slower CPU held no level
    of a fixed 400 ms TTFT target): its named level is the rate one-at-a-time service
    allows (saturating), its TTFT target eight services (a short queue), its TPOT target
    three times the measured one (one sequence at a time: load does not move it)."""
    from workbench.config.run_config import LoadProfile

    service_s = (alone.ttft_ms["p50"] + (shape["output_tokens"] - 1) * alone.tpot_ms["p50"]) / 1e3
    return LoadProfile(request_rate=[round(1 / service_s, 2)], **{**shape, "num_prompts": 24},
                       slo={"ttft_p99_ms": round(8e3 * service_s),
                            "tpot_p99_ms": round(3 * alone.tpot_ms["p99"], 1)},
                       capacity={"resolution": 0.25, "max_levels": 8, "max_seconds": 120,
                                 "level_seconds": 3})


def test_saturation_capacity_and_conversations_on_one_engine(
        tiny_model: Path, tmp_path: Path) -> None:
    """An engine held to one sequence at a time, fed arrivals three times as fast as it
    serves them (measured first, on whatever machine runs the test): its queue grows
    through the level, the telemetry series sees it waiting, and the level is marked
    over-saturated; that closed loop of one request at a time on the same engine is not.
    Then the heaviest arrival rate that holds an SLO on it, searched: bracketed within the
    search's resolution and bounds, every level judged as it measured. And multi-turn
    conversations: each turn sent after the answer before it, its context grown by that
    answer and a user message, most of it served from the engine's prefix cache."""
    from workbench.config.run_config import EngineConfig, LoadProfile
    from workbench.loadtest.bench import level_requests, run_load_test
    from workbench.loadtest.results import LoadResult
    from workbench.mechanisms.placement import apart
    from workbench.serve.engine import EngineServer

    shape = {"prompt_tokens": 24, "output_tokens": 32, "num_prompts": 40, "warmup_prompts": 1,
             "telemetry_interval_s": 0.2}
    # long answers and one sequence at a time make the engine the slow side
    light = LoadProfile(concurrency=[1], **{**shape, "num_prompts": 16, "output_tokens": 128})
    # the engine caches whole blocks (128 tokens on this CPU): prompts past one block
    chat = LoadProfile(concurrency=[2], num_prompts=4, prompt_tokens=200, output_tokens=8,
                       shared_prefix_tokens=16, warmup_prompts=0, telemetry_interval_s=0.1,
                       conversation={"turns": 3, "think_time_s": 0.2, "user_tokens": 16})
    engine = EngineConfig(max_model_len=256, enforce_eager=True, kv_cache_space_gib=1,
                          extra_args=["--max-num-seqs", "1"])
    # the engine on its own core, the load clients on the other (mechanisms/placement.py),
    # as the workbench's own load tests run on a CPU
    with EngineServer(tiny_model, "tiny", engine, tmp_path / "server.log") as server, \
            apart(server.process.pid if server.process else None, None):
        def measure(name: str, prof: LoadProfile) -> LoadResult:
            return run_load_test(server.base_url, "tiny", tiny_model, prof, tmp_path / name,
                                 level_requests(prof, None, 256), name=name,
                                 scrape=server.metrics, ceiling=False)
        results = {"light": measure("light", light)}
        # what this machine serves, not a fixed rate: CI's runner is faster than this one
        rate = float(max(3, round(3 * results["light"].levels[0].request_throughput)))
        results["heavy"] = measure("heavy", LoadProfile(
            request_rate=[rate], **{**shape, "output_tokens": 128}))
        search = _search_sized_by(results["light"].levels[0], shape)
        results |= {name: measure(name, prof) for name, prof in (("search", search),
                                                                 ("chat", chat))}
    over = results["heavy"].levels[0]
    assert over.saturation["over_saturated"] is True, over.saturation
    assert over.saturation["ttft_ms"]["lower"] > 0 and over.saturation["in_flight"]["lower"] > 0
    tel = over.telemetry
    assert tel["peak_running"] == 1 and tel["peak_waiting"] >= 10  # the queue, seen
    raw = json.loads(Path(over.raw_file).read_text())
    samples = tel["samples"]
    assert len(samples) >= 5 and [s["t_s"] for s in samples] == sorted(s["t_s"] for s in samples)
    # the series brackets the requests on their own clock (perf_counter, both processes)
    assert samples[0]["t_s"] <= min(raw["start_times"])
    assert samples[-1]["t_s"] >= max(s + lat for s, lat in zip(raw["start_times"],
                                                               raw["latencies"], strict=True))
    # its first and last reads are the level's server-side figures
    assert over.server["latency"]["e2el_ms"]["count"] == over.completed == 40
    steady = results["light"].levels[0]
    assert steady.saturation["over_saturated"] is False, steady.saturation
    assert steady.telemetry["peak_waiting"] == 0 and steady.telemetry["peak_running"] <= 1
    steps = results["heavy"].telemetry_steps()
    waiting = steps[f"telemetry.{over.label}.waiting"]
    assert waiting[0][0] == 0 and max(v for _, v in waiting) == tel["peak_waiting"]
    found = results["search"].capacity
    assert found["knob"] == "request_rate" and len(found["tried"]) <= 8
    assert found["held"] is not None and found["not_held"] is not None, found
    assert found["not_held"] - found["held"] <= 0.25 * found["held"] or "spent" in found["stopped"]
    searched = [t for t in found["tried"] if not t["named"]]  # the named level first
    assert found["tried"][0]["level"] == search.request_rate[0] and found["tried"][0]["named"]
    for t, lv in zip(searched, results["search"].searched, strict=True):
        assert t["held"] == (bool(lv.slo["meets_slo"]) and not lv.saturation["over_saturated"])
        # three seconds of arrivals, or the profile's 24 requests if more; twice or four
        # times that for a level lengthened because it was too short to judge
        times = int(t["why"].split("x as long")[0].removeprefix("run ")) \
            if t["why"].startswith("run ") else 1
        assert lv.request_rate == t["level"]
        assert lv.completed == max(24, math.ceil(3 * t["level"])) * times
    levels = results["search"].levels + results["search"].searched
    assert found["request_throughput"] == next(lv.request_throughput for lv in levels
                                               if lv.request_rate == found["held"])
    talk = results["chat"].levels[0]
    assert talk.completed == 12 and talk.failed == 0 and talk.concurrency == 2  # one queued
    raw = json.loads(Path(talk.raw_file).read_text())
    for c in range(4):  # the client writes each conversation's turns in order
        turns = range(3 * c, 3 * c + 3)
        lens = [raw["input_lens"][i] for i in turns]
        assert lens == [200, 200 + 8 + 16, 200 + 2 * (8 + 16)]
        for a, b in zip(turns, turns[1:], strict=False):  # the next turn waits on the answer
            assert raw["start_times"][b] >= raw["start_times"][a] + raw["latencies"][a]
    # a later turn finds its first block cached: 4 x 256 of 4 x 672 prompt tokens
    assert talk.telemetry["prefix_cache_hit_rate"] > 0.3, talk.telemetry
    assert results["chat"].workload["conversations"] == 4
