"""Two looks at a suite's items (the policy's `second_look`), by simulation through the real
gates: how often a candidate exactly one margin worse is promoted (a false promote), and how
often a candidate with no loss is, when it churns answers as a quantised model does.

    .venv/bin/python benchmarks/two_looks.py [--runs 1000] [--first 120] [--all 480]
                                             [--churn 0.14] [--margin 0.05]

Each run draws a baseline (right on 60% of items) and a candidate that changes `churn` of
them, losing `drop` net. Four ways of judging one paired non-inferiority gate:
- one look at the first items (the smoke sample) at the policy's level;
- one look at every item at the policy's level;
- two looks, each at half of alpha: the first items, then, when open, every item (what
  evaluate does with `second_look: true`; gate/looks.py);
- two looks, each at alpha whole: looking twice without paying for it.
Prints the share of runs promoted by each (docs/gates.md, "Two looks").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from aa_false_rejects import result  # noqa: E402

from workbench.config.gate_policy import GatePolicy, QualityGate  # noqa: E402
from workbench.gate.evidence import Evidence  # noqa: E402
from workbench.gate.gates import evaluate_gates  # noqa: E402


def candidate(base: np.ndarray, churn: float, drop: float, rng: np.random.Generator
              ) -> np.ndarray:
    """Right items lost and wrong ones gained so that churn = lost + gained and the net
    change is -drop, in expectation (the truth, not the sample)."""
    right = float(base.mean())
    lose, gain = (churn + drop) / 2 / right, (churn - drop) / 2 / (1 - right)
    u = rng.random(len(base))
    return np.where(base == 1, (u >= lose).astype(float), (u < gain).astype(float))


def status(policy: GatePolicy, base: np.ndarray, cand: np.ndarray, n: int, seed: int) -> str:
    ev = Evidence({"q": result("q", base[:n])}, {"q": result("q", cand[:n])}, None, None,
                  "cpu")
    return evaluate_gates(policy, ev, seed)[0].status


def two_looks(policy: GatePolicy, base: np.ndarray, cand: np.ndarray, first: int,
              seed: int) -> bool:
    for n in (first, len(base)):
        got = status(policy, base, cand, n, seed)
        if got != "inconclusive":
            return got == "pass"
    return False


def simulate(runs: int, first: int, every: int, churn: float, drop: float, margin: float,
             seed: int) -> dict[str, float]:
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=margin)],
                        bootstrap_resamples=1000)
    split = policy.for_look(2)
    rng = np.random.default_rng(seed)
    promoted = dict.fromkeys(("smoke", "every", "two looks, alpha/2", "two looks, alpha"), 0)
    for run in range(runs):
        base = (rng.random(every) < 0.6).astype(float)
        cand = candidate(base, churn, drop, rng)
        promoted["smoke"] += status(policy, base, cand, first, run) == "pass"
        promoted["every"] += status(policy, base, cand, every, run) == "pass"
        promoted["two looks, alpha/2"] += two_looks(split, base, cand, first, run)
        promoted["two looks, alpha"] += two_looks(policy, base, cand, first, run)
    return {k: v / runs for k, v in promoted.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--first", type=int, default=120)
    ap.add_argument("--all", type=int, default=480, dest="every")
    ap.add_argument("--churn", type=float, default=0.14)
    ap.add_argument("--margin", type=float, default=0.05)
    args = ap.parse_args()
    print(f"{args.runs} runs; first look {args.first} items, second {args.every}; churn "
          f"{args.churn}, margin {args.margin}; share of runs promoted (one-sided alpha "
          "0.025):")
    print("| candidate | smoke only | every item | two looks, alpha/2 each | "
          "two looks, alpha each |")
    print("|---|---|---|---|---|")
    for label, drop in (("one margin worse", args.margin), ("no loss", 0.0)):
        got = simulate(args.runs, args.first, args.every, args.churn, drop, args.margin, 7)
        print(f"| {label} | " + " | ".join(f"{v:.4f}" for v in got.values()) + " |",
              flush=True)


if __name__ == "__main__":
    main()
