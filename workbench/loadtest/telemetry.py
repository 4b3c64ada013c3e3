"""The engine's state over a load level, as a time series: its /metrics read every
`telemetry_interval_s` while the level's requests run.

Two scrapes around a level (engine_metrics.server_side_level) say what happened in it;
a series says when: whether requests queued (waiting > 0) or the KV cache filled and
preempted while a latency tail grew, and how often the prefix cache hit. The clock is
time.perf_counter(), the clock `vllm bench serve` stamps its requests' start_times with
(both CLOCK_MONOTONIC on Linux), so a sample and the requests in flight at that moment
line up without any offset (docs/load.md, "Telemetry").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from typing_extensions import TypedDict

from workbench.loadtest.engine_metrics import Scrape, parse_scrape

__all__ = ["COUNTERS", "GAUGES", "Sample", "Sampler", "Telemetry", "telemetry_of"]

# the engine's gauges: parse_scrape keeps the largest over label sets, so with
# data-parallel ranks these are the busiest rank's, not the engine's sum
GAUGES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
          "vllm:kv_cache_usage_perc": "kv_cache_usage"}
# its counters, as their increase since the level's first sample
COUNTERS = {"vllm:num_preemptions": "preemptions", "vllm:prefix_cache_hits": "prefix_hits",
            "vllm:prefix_cache_queries": "prefix_queries"}


class Sample(TypedDict):
    """The engine at one moment: t_s on the requests' clock (perf_counter seconds)."""

    t_s: float
    running: float
    waiting: float
    kv_cache_usage: float  # 0..1
    preemptions: float  # since the level's first sample
    prefix_hits: float  # tokens, since the level's first sample
    prefix_queries: float


class Telemetry(TypedDict, total=False):
    """A level's series and what it comes to; empty when the engine was not scraped."""

    interval_s: float
    samples: list[Sample]
    missed: int  # scrapes that failed (the engine busy past the timeout, or gone)
    peak_running: float
    peak_waiting: float
    peak_kv_cache_usage: float
    preemptions: float
    prefix_cache_hit_rate: float | None  # hits / queries over the level; None: no query


def _sample(now: float, scrape: Scrape, origin: Scrape) -> Sample:
    gauges = {label: scrape.gauges.get(name, 0.0) for name, label in GAUGES.items()}
    counters = {label: scrape.counters.get(name, 0.0) - origin.counters.get(name, 0.0)
                for name, label in COUNTERS.items()}
    return Sample(t_s=round(now, 3), running=gauges["running"], waiting=gauges["waiting"],
                  kv_cache_usage=round(gauges["kv_cache_usage"], 4),
                  preemptions=counters["preemptions"], prefix_hits=counters["prefix_hits"],
                  prefix_queries=counters["prefix_queries"])


class Sampler:
    """Context manager: a thread that scrapes every interval_s while the level runs. The
    reads on the way in and out must succeed (they bracket the level: its server-side
    figures, engine_metrics.server_side_level); one in between that fails is a gap,
    counted in `missed`."""

    def __init__(self, scrape: Callable[[], str], interval_s: float) -> None:
        self.scrape, self.interval_s = scrape, interval_s
        self.samples: list[Sample] = []
        self.missed = 0
        self._first: Scrape | None = None
        self._last: Scrape | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="telemetry", daemon=True)

    def __enter__(self) -> Sampler:
        self._record(time.perf_counter(), parse_scrape(self.scrape()))
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if exc_type is None:
            self._record(time.perf_counter(), parse_scrape(self.scrape()))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            now = time.perf_counter()
            try:
                scrape = parse_scrape(self.scrape())
            except Exception:  # noqa: BLE001
                # a gap in the series, counted; whether the engine still serves is the
                # Watchdog's call (bench.py), not the sampler's
                self.missed += 1
                continue
            self._record(now, scrape)

    def _record(self, now: float, scrape: Scrape) -> None:
        self._first = self._first or scrape
        self._last = scrape
        self.samples.append(_sample(now, scrape, self._first))

    def generated(self) -> float | None:
        """Output tokens the engine has generated in all, as of its latest read (the load
        watchdog's progress check reads this rather than scraping /metrics again)."""
        last = self._last
        return last.counters.get("vllm:generation_tokens") if last is not None else None

    def bracket(self) -> tuple[Scrape, Scrape]:
        """The reads on the way in and on the way out."""
        assert self._first is not None and self._last is not None
        return self._first, self._last

    def telemetry(self) -> Telemetry:
        return telemetry_of(self.samples, self.interval_s, self.missed)


def telemetry_of(samples: list[Sample], interval_s: float, missed: int = 0) -> Telemetry:
    """The series with its peaks, preemptions and the prefix cache's hit rate."""
    if not samples:
        return Telemetry(interval_s=interval_s, samples=[], missed=missed)
    last = samples[-1]
    return Telemetry(
        interval_s=interval_s, samples=samples, missed=missed,
        peak_running=max(s["running"] for s in samples),
        peak_waiting=max(s["waiting"] for s in samples),
        peak_kv_cache_usage=max(s["kv_cache_usage"] for s in samples),
        preemptions=last["preemptions"],
        prefix_cache_hit_rate=(round(last["prefix_hits"] / last["prefix_queries"], 4)
                               if last["prefix_queries"] else None))
