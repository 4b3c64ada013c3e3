"""The engine's telemetry series: a sampler over a scrape whose values are known, what the
series comes to, and its plot and MLflow steps."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from workbench.loadtest.results import LevelResult, LoadResult
from workbench.loadtest.telemetry import Sampler, telemetry_of
from workbench.record.plots import plot_telemetry


class Engine:
    """/metrics text of an engine whose queue grows by one request per read."""

    def __init__(self, fail_on: set[int] | None = None) -> None:
        self.reads, self.fail_on = 0, fail_on or set()

    def scrape(self) -> str:
        self.reads += 1
        if self.reads in self.fail_on:
            raise OSError("busy")
        n = self.reads
        return (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n"
                f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting {n - 1}\n"
                f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc {n / 100}\n"
                f"# TYPE vllm:num_preemptions_total counter\n"
                f"vllm:num_preemptions_total {5 + n // 3}\n"
                f"# TYPE vllm:prefix_cache_queries_total counter\n"
                f"vllm:prefix_cache_queries_total {100 + 10 * n}\n"
                f"# TYPE vllm:prefix_cache_hits_total counter\n"
                f"vllm:prefix_cache_hits_total {4 * n}\n")


def test_the_sampler_reads_the_engine_through_the_level_and_counts_from_its_start() -> None:
    engine = Engine()
    before = time.perf_counter()
    with Sampler(engine.scrape, 0.05) as sampler:
        time.sleep(0.4)
    tel = sampler.telemetry()
    samples = tel["samples"]
    assert len(samples) == engine.reads >= 5
    after = time.perf_counter()
    assert before - 1e-3 <= samples[0]["t_s"] < samples[-1]["t_s"] <= after + 1e-3  # ms
    assert [s["waiting"] for s in samples] == list(range(len(samples)))
    assert samples[0]["preemptions"] == 0 and samples[0]["prefix_queries"] == 0  # from here
    assert tel["peak_waiting"] == len(samples) - 1 and tel["peak_running"] == 2
    last = engine.reads
    assert tel["preemptions"] == last // 3 - 1 // 3
    assert tel["prefix_cache_hit_rate"] == pytest.approx(4 * (last - 1) / (10 * (last - 1)),
                                                         abs=1e-4)
    first, final = sampler.bracket()  # the server-side figures' two reads
    assert first.gauges["vllm:num_requests_waiting"] == 0
    assert final.gauges["vllm:num_requests_waiting"] == last - 1


def test_a_failed_read_inside_the_level_is_a_gap_and_one_on_the_way_in_is_an_error() -> None:
    engine = Engine(fail_on={2, 3})
    with Sampler(engine.scrape, 0.05) as sampler:
        time.sleep(0.3)
    assert sampler.missed == 2 and len(sampler.samples) == engine.reads - 2
    with pytest.raises(OSError), Sampler(Engine(fail_on={1}).scrape, 0.05):
        pass


def test_no_samples_no_peaks_and_no_queries_no_hit_rate() -> None:
    assert telemetry_of([], 0.5) == {"interval_s": 0.5, "samples": [], "missed": 0}
    one = {"t_s": 1.0, "running": 1.0, "waiting": 0.0, "kv_cache_usage": 0.1,
           "preemptions": 0.0, "prefix_hits": 0.0, "prefix_queries": 0.0}
    assert telemetry_of([one], 0.5)["prefix_cache_hit_rate"] is None  # type: ignore[list-item]


def level(key: str, samples: list, over: bool) -> LevelResult:
    stats = {"p50": 10.0, "p95": 20.0, "p99": 30.0, "max": 40.0, "mean": 12.0}
    return LevelResult(None, 8, 0, 1.0, 1.0, 50.0, stats, stats, stats, stats, "raw",
                       label=key, telemetry=telemetry_of(samples, 0.5),
                       saturation={"test": "t", "over_saturated": over})


def test_the_telemetry_plot_and_the_mlflow_steps(tmp_path: Path) -> None:
    engine = Engine()
    with Sampler(engine.scrape, 0.02) as sampler:
        time.sleep(0.15)
    light, heavy = level("r1", sampler.samples, False), level("r9", sampler.samples, True)
    load = LoadResult("client", {}, [light, heavy])
    path = plot_telemetry({"baseline": load, "candidate": load}, "t", tmp_path / "t.png")
    assert path is not None and path.read_bytes()[:4] == b"\x89PNG"
    bare = dataclasses.replace(load, levels=[dataclasses.replace(light, telemetry={})])
    assert plot_telemetry({"baseline": bare}, "t", tmp_path / "none.png") is None
    steps = load.telemetry_steps()
    waiting = steps["telemetry.r9.waiting"]
    assert waiting[0] == (0, 0.0) and [v for _, v in waiting] == [
        s["waiting"] for s in sampler.samples]
    assert all(a[0] < b[0] for a, b in zip(waiting, waiting[1:], strict=False))  # ms, increasing
    metrics = load.metrics()
    assert metrics["r9.over_saturated"] == 1.0 and metrics["r1.over_saturated"] == 0.0
    assert metrics["r9.peak_waiting"] == len(sampler.samples) - 1
