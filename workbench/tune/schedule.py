"""Which trial to run next: how many of the most sensitive blocks to keep in 16-bit.

Keeping more blocks never makes a candidate worse in expectation and always costs more
memory, so the search looks for the smallest k the policy promotes: k = 0 (the recipe as
the config states it), then doubling (1, 2, 4, ...) until a trial is promoted, then
bisection between the largest k that was not and the smallest that was. That needs about
2·log2(k*) + 1 trials for an answer k*, where a scan from k = 0 would need k* + 1. Only
"promote" counts as a pass: an inconclusive trial is treated like a rejected one, so the
search never settles on a k the evidence did not clear (docs/tune.md, "The search").
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["PASS", "next_kept", "settled"]

PASS = "promote"


def next_kept(tried: Mapping[int, str], most: int) -> int | None:
    """The next number of blocks to keep, given each tried k's decision; None when the
    search is settled: the smallest promoted k is known (its neighbour below was tried and
    not promoted), or `most` blocks were kept and nothing was promoted."""
    passed = [k for k, decision in tried.items() if decision == PASS]
    if not passed:
        if not tried:
            return 0
        k = min(most, max(1, 2 * max(tried)))
        return None if k in tried else k
    best = min(passed)
    below = max((k for k in tried if k < best), default=-1)
    if best - below <= 1:
        return None
    return (below + best) // 2


def settled(tried: Mapping[int, str], most: int) -> int | None:
    """The smallest promoted k once the search is settled (None: nothing promoted)."""
    passed = [k for k, decision in tried.items() if decision == PASS]
    return min(passed) if passed and next_kept(tried, most) is None else None
