"""Capacity at the SLO: the heaviest level a model serves while holding it, searched.

The profile's named levels say how a model does at loads someone chose; a fleet is sized
by the heaviest load one replica holds. The search varies the profile's own knob (arrivals
per second, or requests in flight) with its requests and SLO: doubling from `start` until a
level does not hold, then bisecting between the heaviest level that held and the lightest
above it that did not, until they are within `resolution` of each other (adjacent, for
requests in flight) or the search's bounds are spent. A level holds when it meets the SLO
(p99 TTFT and TPOT within the targets, no request failed: results.slo_figures) and was not
over-saturated (saturation.py): a queue that grew through the level met its SLO only
because the level ended. That is GuideLLM's and AIPerf's doubling-then-bisection on SLO
attainment, and it stops where the engine saturates (docs/load.md, "Capacity at the SLO").

The answer is a bracket, [held, did not hold]: the search's own resolution. With several
engine sessions per model (load.rounds) each session searches, and the model's bracket
spans them all (gate/capacity.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from typing_extensions import TypedDict

from workbench.config.load import CapacitySearch
from workbench.loadtest.level import LevelResult

__all__ = ["Capacity", "LevelFailed", "Tried", "held", "next_level", "search_capacity"]

FLOOR_SHARE = 1 / 64  # halving below start / 64 without a level that holds: none does
# A rate level too short for the saturation test to judge is run again twice as long, then
# four times: on a slow CPU the lowest levels of a search hold one or two requests each
# (docs/load.md, "Capacity at the SLO"), which says nothing about a rate either way.
LENGTHEN_MAX = 4


class LevelFailed(Exception):
    """A search level that ended without figures while the engine still serves (no
    request completed, every one timed out): the load did not hold."""


class Tried(TypedDict):
    level: float
    label: str
    held: bool
    why: str
    named: bool  # one of the profile's named levels, measured before the search


class Capacity(TypedDict, total=False):
    """search_capacity(): empty when the profile asks for no search."""

    knob: str  # "request_rate" or "concurrency"
    held: float | None  # the heaviest level that held (None: none did)
    not_held: float | None  # the lightest level above it that did not (None: none failed)
    resolution: float
    stopped: str  # why the search ended
    tried: list[Tried]
    request_throughput: float | None  # measured at `held`: requests/s served within the SLO
    output_throughput: float | None
    seconds: float


def held(level: LevelResult) -> tuple[bool, str]:
    """Whether a level held the SLO, and why (not)."""
    slo, why = level.slo, []
    if level.failed:
        why.append(f"{level.failed} request(s) failed")
    if slo.get("ttft_p99_ms") is not None and level.ttft_ms["p99"] > slo["ttft_p99_ms"]:
        why.append(f"p99 TTFT {level.ttft_ms['p99']:.0f} > {slo['ttft_p99_ms']:g} ms")
    if slo.get("tpot_p99_ms") is not None and level.tpot_ms["p99"] > slo["tpot_p99_ms"]:
        why.append(f"p99 TPOT {level.tpot_ms['p99']:.1f} > {slo['tpot_p99_ms']:g} ms")
    verdict = level.saturation.get("over_saturated")
    if verdict:
        why.append("over-saturated")
    unjudged = too_short_to_judge(level)
    if unjudged:
        why.append("too short to tell a steady rate from a burst ("
                   f"{level.saturation.get('reason', 'not judged')}): more requests per level")
    ok = bool(slo.get("meets_slo")) and not verdict and not unjudged
    if ok:
        return True, (f"p99 TTFT {level.ttft_ms['p99']:.0f} ms, TPOT "
                      f"{level.tpot_ms['p99']:.1f} ms within the SLO")
    return False, "; ".join(why) or "the SLO was not met"


def too_short_to_judge(level: LevelResult) -> bool:
    """An arrival-rate level the saturation test could not judge (its requests arrived
    within a few request lifetimes: one burst) proves nothing about the rate; a closed
    loop cannot outrun the engine, so its levels need no verdict."""
    return level.request_rate is not None and level.saturation.get("over_saturated") is None


def _judgeable(run_level: Callable[..., LevelResult], value: float, index: int,
               level: LevelResult, time_left: Callable[[], bool]) -> tuple[LevelResult, int]:
    """The level, run again longer (2x, then 4x) while it is too short to judge and the
    search has time; and how many times its first length it ran."""
    times = 1
    while too_short_to_judge(level) and times < LENGTHEN_MAX and time_left():
        times *= 2
        level = run_level(value, index, times)
    return level, times


def next_level(tried: Mapping[float, bool], start: float, resolution: float,
               integer: bool, most: float) -> float | None:
    """The next level to try given each tried level's outcome; None when settled: the
    bracket is within the resolution (adjacent integers), nothing holds down to the floor,
    or everything holds up to `most`."""
    if not tried:
        return start
    holds = sorted(x for x, ok in tried.items() if ok)
    fails = sorted(x for x, ok in tried.items() if not ok)
    if not fails:
        up = min(2 * holds[-1], most)
        return None if up in tried else up
    top = fails[0]
    below = [x for x in holds if x < top]
    if not below:
        down = top // 2 if integer else top / 2
        return None if down < (1 if integer else start * FLOOR_SHARE) else down
    bottom = below[-1]
    if integer:
        # no level above `most`: it would send the same requests all at once again
        middle = min((bottom + top) // 2, most)
        return None if top - bottom <= 1 or middle in tried or middle <= bottom else middle
    return None if top - bottom <= resolution * bottom else round((bottom + top) / 2, 6)


def bracket(tried: Mapping[float, bool]) -> tuple[float | None, float | None]:
    """(the heaviest level that held below the lightest that did not, that one)."""
    fails = sorted(x for x, ok in tried.items() if not ok)
    top = fails[0] if fails else None
    holds = [x for x, ok in tried.items() if ok and (top is None or x < top)]
    return (max(holds) if holds else None), top


def search_capacity(spec: CapacitySearch, knob: str, start: float, most: float,
                    run_level: Callable[..., LevelResult],
                    on_level: Callable[[LevelResult, bool, str], None] = lambda *_: None,
                    known: Mapping[float, LevelResult] | None = None
                    ) -> tuple[Capacity, list[LevelResult]]:
    """Run the search, one level per call of run_level(value, index[, times its length]);
    the capacity found and every level it ran. `known`: levels of the same knob already
    measured in this session (the profile's named levels), tried rather than run again."""
    integer = knob == "concurrency"
    began = time.monotonic()
    outcomes: dict[float, bool] = {}
    tried: list[Tried] = []
    for named, lv in sorted((known or {}).items()):
        ok, why = held(lv)
        outcomes[named] = ok
        tried.append(Tried(level=named, label=lv.key, held=ok, why=why, named=True))
    measured = dict(known or {})
    levels: list[LevelResult] = []
    stopped = ""
    # a start the profile names is tried first, whatever its named levels say
    first = spec.start if spec.start is not None and spec.start not in outcomes else None
    while True:
        value = first if first is not None else next_level(outcomes, start,
                                                           spec.resolution, integer, most)
        first = None
        if value is None:
            stopped = "settled: " + _settled(outcomes, spec.resolution, integer, most)
            break
        if len(levels) >= spec.max_levels:
            stopped = f"its bound of {spec.max_levels} levels was spent"
            break
        if levels and time.monotonic() - began >= spec.max_seconds:  # the first always runs
            stopped = f"its bound of {spec.max_seconds:g} s was spent"
            break
        try:
            level = run_level(value, len(levels))
        except LevelFailed as err:  # the engine lives, the level did not finish: not held
            outcomes[value] = False
            label = f"{'c' if integer else 'r'}{value:g}"  # as results.level_label names it
            tried.append(Tried(level=value, label=label, held=False, why=str(err),
                               named=False))
            stopped = f"a level did not finish ({err})"
            break
        level, times = _judgeable(run_level, value, len(levels), level,
                                  lambda: time.monotonic() - began < spec.max_seconds)
        ok, why = held(level)
        if times > 1:
            why = f"run {times}x as long, the shorter too short to judge: {why}"
        outcomes[value] = ok
        levels.append(level)
        measured[value] = level
        tried.append(Tried(level=value, label=level.key, held=ok, why=why, named=False))
        on_level(level, ok, why)
    low, high = bracket(outcomes)
    at = measured.get(low) if low is not None else None
    return Capacity(knob=knob, held=low, not_held=high, resolution=spec.resolution,
                    stopped=stopped, tried=tried,
                    request_throughput=at.request_throughput if at else None,
                    output_throughput=at.output_throughput if at else None,
                    seconds=round(time.monotonic() - began, 1)), levels


def _settled(outcomes: Mapping[float, bool], resolution: float, integer: bool,
             most: float) -> str:
    low, high = bracket(outcomes)
    if low is None:
        return "no level held, down to the floor"
    if high is None:
        return f"every level held, up to {most:g} (past it a level is one burst)"
    gap = "adjacent" if integer else f"within {resolution:.0%}"
    return f"held at {low:g}, not at {high:g} ({gap})"
