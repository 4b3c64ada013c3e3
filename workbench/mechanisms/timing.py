"""Where a run's time goes: each stage's span, on one clock, for timing.json.

A stage times itself where it runs (`with span("baseline: arithmetic", "suite")`) into
the run's timeline, when one is active (`with timeline() as t`); outside one, span() only
runs its block. The timeline is a context variable, so stages deep in the measurement
need no handle passed down to them. What it comes to (to_json): every span in the order
it started, seconds per kind, and the engine-busy share: the wall time in which an
engine was answering the run's requests (suites and load levels) over the whole.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

__all__ = ["BUSY_KINDS", "Span", "Timeline", "current", "span", "timeline"]

# the kinds of span in which an engine answers the run's own requests
BUSY_KINDS = ("suite", "load")


@dataclass(frozen=True)
class Span:
    name: str
    kind: str  # quantise, engine_start, suite, load, engine_stop, judge, log, stage, ...
    start_s: float  # since the timeline began
    seconds: float


@dataclass
class Timeline:
    started: float = field(default_factory=time.perf_counter)
    spans: list[Span] = field(default_factory=list)

    def to_json(self) -> dict:
        wall = time.perf_counter() - self.started
        by_kind: dict[str, float] = {}
        for s in self.spans:
            by_kind[s.kind] = round(by_kind.get(s.kind, 0.0) + s.seconds, 2)
        busy = sum(s.seconds for s in self.spans if s.kind in BUSY_KINDS)
        return {"wall_time_s": round(wall, 2), "engine_busy_s": round(busy, 2),
                "engine_busy_share": round(busy / wall, 4) if wall > 0 else 0.0,
                "by_kind": by_kind,
                "spans": [{"name": s.name, "kind": s.kind, "start_s": round(s.start_s, 2),
                           "seconds": round(s.seconds, 2)}
                          for s in sorted(self.spans, key=lambda s: s.start_s)]}


_CURRENT: ContextVar[Timeline | None] = ContextVar("workbench_timeline", default=None)


def current() -> Timeline | None:
    return _CURRENT.get()


@contextlib.contextmanager
def timeline() -> Iterator[Timeline]:
    """A run's timeline, current until the block ends."""
    line = Timeline()
    token = _CURRENT.set(line)
    try:
        yield line
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def span(name: str, kind: str) -> Iterator[None]:
    """Time the block into the current timeline (a failed block's time too)."""
    line = _CURRENT.get()
    began = time.perf_counter()
    try:
        yield
    finally:
        if line is not None:
            line.spans.append(Span(name, kind, began - line.started,
                                   time.perf_counter() - began))
