"""How often the over-saturation test (workbench/loadtest/saturation.py) flags a level, by
simulation: Poisson arrivals at one first-come server, from a fifth of its capacity to
three times it, in levels of two sizes.

    .venv/bin/python benchmarks/saturation_rates.py [--levels 200] [--requests 40 60]

The simulated server is the unit tests' (tests/unit/test_saturation.py: each request's
first token when its turn comes); `--levels` seeded levels per load. Prints the share of
levels flagged at each load (docs/load.md, "Over-saturation").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "unit"))
from test_saturation import queue  # noqa: E402

from workbench.loadtest import saturation as sat  # noqa: E402

LOADS = (0.2, 0.3, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0)
SERVICE_S = 0.2


def flagged(load: float, levels: int, requests: int) -> float:
    hits = sum(bool(sat.saturation(queue(load / SERVICE_S, SERVICE_S, requests, seed))
                    ["over_saturated"]) for seed in range(levels))
    return hits / levels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, default=200)
    parser.add_argument("--requests", type=int, nargs="+", default=[40, 60])
    args = parser.parse_args()
    print(f"{args.levels} levels per load and size; share flagged over-saturated")
    print(f"{'load / capacity':>16}" + "".join(f" {f'{n} arrivals':>12}" for n in args.requests))
    for load in LOADS:
        shares = [flagged(load, args.levels, n) for n in args.requests]
        print(f"{load:>16.1f}" + "".join(f" {share:>12.1%}" for share in shares))


if __name__ == "__main__":
    main()
