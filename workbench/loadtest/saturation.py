"""Whether a load level outran the engine: over-saturation, by a stated test.

An engine that keeps up with its arrivals reaches a steady state: as many requests in
flight, and the same time to first token, late in the level as early on. One that does not
builds a queue, so both grow with time. The test, on the level's own per-request results,
taken in order of start time: the drift of (a) TTFT and (b) the number of the level's
requests in flight when each started (itself included, counted from the start times and
latencies the client recorded), each from its steps from one request to the next (its last
value less its first, over the time between them), with a one-sided lower confidence bound
from how the steps scatter; call the level over-saturated when both lower bounds are above
zero. The ramp is left out (every level fills from empty, which is growth too): the first
RAMP_SHARE of the arrival span, or RAMP_LIFETIMES of the level's shortest request lifetime
if that is longer (a level whose requests all arrive within a request's lifetime is one
burst, with no steady state to leave); a level with fewer than MIN_REQUESTS requests after
it is not judged.

GuideLLM's over-saturation stop (`--over-saturation`) watches the same two quantities,
fitting least-squares slopes over a sliding window while a run goes on, and flags a slope
whose margin of error is below twice the slope itself (a relative margin of 2), which a
slope whose interval still holds zero can pass; here the interval must exclude zero.
This judges a finished level, so there is no window to slide: the whole level after its
ramp is the sample (docs/load.md, "Over-saturation").
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats
from typing_extensions import TypedDict

from workbench.loadtest.telemetry import Telemetry

__all__ = ["CONFIDENCE", "MIN_REQUESTS", "RAMP_LIFETIMES", "RAMP_SHARE", "Saturation", "SlopeFit",
           "in_flight_at",
           "saturation", "state_text"]

CONFIDENCE = 0.95  # one-sided, for each slope
RAMP_SHARE = 0.25  # of the level's arrival span, left out as its ramp-up,
RAMP_LIFETIMES = 2  # or this many of its shortest request's lifetimes, if longer
MIN_REQUESTS = 8  # after the ramp: fewer and the level is not judged

TEST = (f"drifts of TTFT and of requests in flight from one request to the next, the ramp (the "
        f"first {RAMP_SHARE:.0%} of the arrival span, or {RAMP_LIFETIMES} shortest request "
        f"lifetimes) left out; over-saturated when both one-sided {CONFIDENCE:.0%} lower "
        "bounds are above zero")


class SlopeFit(TypedDict):
    slope: float  # per second of the level
    lower: float  # one-sided lower confidence bound
    n: int


class Saturation(TypedDict, total=False):
    """saturation(): empty for a level measured before the test existed."""

    test: str
    over_saturated: bool | None  # None: too few requests after the ramp to judge
    ttft_ms: SlopeFit  # ms per second
    in_flight: SlopeFit  # requests per second
    reason: str


def in_flight_at(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each request, how many of the level's requests were in flight when it started
    (itself included)."""
    return np.array([int(np.sum((starts <= t) & (ends > t))) for t in starts])


def _drift(x: np.ndarray, y: np.ndarray) -> SlopeFit:
    """y's drift per unit of x, from its steps from one request to the next: the sum of
    the steps over the sum of the gaps (the last value less the first, over the span), its
    standard error from how the steps scatter about that drift. Over capacity, a queue's
    wait is a random walk (Lindley's recursion: each request waits as long as the one
    before it, plus that one's service, less the gap between their arrivals), so its steps
    are independent, their sum over the span is the drift per second, and the bound holds
    at its stated level. Within capacity the wait is stationary: its steps sum to its last
    value less its first, which does not grow with the level, while their scatter does, so
    the bound is conservative there and a steady queue is seldom flagged. A least-squares line
    through the values themselves has neither property: a random walk's residuals follow
    one another, and its slope's error has to be widened so far for that that a queue
    growing by seconds a second can fail to clear zero (docs/load.md)."""
    dx, dy = np.diff(x), np.diff(y)
    steps, gap = len(dx), float(dx.sum())
    slope = float(dy.sum()) / gap
    scatter = dy - slope * dx
    err = math.sqrt(float(scatter @ scatter) / (steps - 1) * steps) / gap
    lower = slope - float(stats.t.ppf(CONFIDENCE, steps - 1)) * err
    return SlopeFit(slope=round(slope, 4), lower=round(lower, 4), n=len(x))


def saturation(raw: dict) -> Saturation:
    """The test above on `vllm bench serve`'s detailed results for one level."""
    ok = [i for i, err in enumerate(raw.get("errors", [])) if not err]
    starts = np.array([raw["start_times"][i] for i in ok], dtype=float)
    if starts.size == 0:
        return Saturation(test=TEST, over_saturated=None, reason="no request completed")
    ends = starts + np.array([raw["latencies"][i] for i in ok], dtype=float)
    ttft = 1000 * np.array([raw["ttfts"][i] for i in ok], dtype=float)
    begin, span = starts.min(), starts.max() - starts.min()
    # the ramp: until the engine could have reached its steady state, which takes at least
    # a request's lifetime with no queue ahead of it (the level's shortest), twice over
    ramp = max(RAMP_SHARE * span, RAMP_LIFETIMES * float((ends - starts).min()))
    keep = starts >= begin + ramp
    n = int(keep.sum())
    if span <= 0 or n < MIN_REQUESTS:
        return Saturation(test=TEST, over_saturated=None,
                          reason=f"{n} request(s) after the ramp; {MIN_REQUESTS} are needed")
    order = np.argsort(starts[keep], kind="stable")
    x = (starts[keep] - begin)[order]
    if np.ptp(x) <= 0:
        return Saturation(test=TEST, over_saturated=None,
                          reason="every request after the ramp started at once")
    ttft_fit = _drift(x, ttft[keep][order])
    flight_fit = _drift(x, in_flight_at(starts, ends)[keep][order].astype(float))
    over = ttft_fit["lower"] > 0 and flight_fit["lower"] > 0
    return Saturation(test=TEST, over_saturated=bool(over), ttft_ms=ttft_fit,
                      in_flight=flight_fit,
                      reason=(f"TTFT {ttft_fit['slope']:+.0f} ms/s (lower bound "
                              f"{ttft_fit['lower']:+.0f}), in flight {flight_fit['slope']:+.2f}/s "
                              f"(lower bound {flight_fit['lower']:+.2f}) over {n} requests"))


def state_text(telemetry: Telemetry, found: Saturation) -> str:
    """What the engine went through in a level, for its console line: the queue, the KV
    cache, preemptions, and the verdict when the level outran the engine."""
    parts = []
    if telemetry.get("samples"):
        parts.append(f"engine peak {telemetry.get('peak_running', 0):.0f} running, "
                     f"{telemetry.get('peak_waiting', 0):.0f} waiting, KV cache "
                     f"{telemetry.get('peak_kv_cache_usage', 0):.0%}")
        if telemetry.get("preemptions"):
            parts.append(f"{telemetry['preemptions']:.0f} preempted")
    if found.get("over_saturated"):
        parts.append(f"OVER-SATURATED ({found.get('reason', '')})")
    return "; " + "; ".join(parts) if parts else ""
