"""How often does the policy reject a candidate that is acceptable in truth? By simulation,
with the default policy's shape: one paired test per gated suite and slice.

    .venv/bin/python benchmarks/aa_false_rejects.py [--runs 200] [--tests 20] [--n 120]

Two candidates, each judged with `multiple_comparisons: none` and `holm`:
- A/A: the baseline re-run, each item's outcome flipped either way with probability eps
  (greedy decoding that is not bit-exact across sessions; 0 flips on this CPU's engine);
- at the margin: every suite truly `margin` worse, the hardest acceptable candidate, where
  each test's false-fail chance is alpha by construction.
Prints, per case, the share of runs with at least one failed gate (a false reject), with at
least one inconclusive gate and none failed, and with every gate passed (docs/gates.md,
"False rejects").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workbench.config.gate_policy import GatePolicy, QualityGate  # noqa: E402
from workbench.gate.evidence import Evidence  # noqa: E402
from workbench.gate.gates import evaluate_gates  # noqa: E402
from workbench.suites.results import ItemResult, SuiteResult  # noqa: E402


def result(name: str, scores: np.ndarray) -> SuiteResult:
    items = [ItemResult(f"i{k}", ("s",), "h", f"answer {k}", float(v), 0.0, 0)
             for k, v in enumerate(scores)]
    return SuiteResult(name, "1", "d", len(items), float(scores.mean()),
                       {"s": {"n": len(items), "accuracy": float(scores.mean())}}, "f", items)


def candidate(base: np.ndarray, eps: float, drop: float, rng: np.random.Generator
              ) -> np.ndarray:
    """The baseline's outcomes flipped either way with chance eps, then each right item
    lost with the chance that makes the expected loss `drop` (the truth, not the sample,
    sits at the margin)."""
    cand = np.where(rng.random(len(base)) < eps, 1 - base, base)
    share_right = max(float(cand.mean()), 1e-9)
    lose = (cand == 1) & (rng.random(len(base)) < drop / share_right)
    cand[lose] = 0
    return cand


def simulate(runs: int, tests: int, n: int, eps: float, drop: float, margin: float,
             holm: bool, seed: int) -> dict[str, float]:
    gates = [QualityGate(suite=f"s{k}", max_drop=margin) for k in range(tests)]
    policy = GatePolicy(quality=gates, bootstrap_resamples=1000,
                        multiple_comparisons="holm" if holm else "none")
    rng = np.random.default_rng(seed)
    counts = {"reject": 0, "inconclusive": 0, "promote": 0}
    for run in range(runs):
        bases = {f"s{k}": (rng.random(n) < 0.6).astype(float) for k in range(tests)}
        cands = {k: candidate(b, eps, drop, rng) for k, b in bases.items()}
        outcomes = evaluate_gates(policy, Evidence(
            {k: result(k, b) for k, b in bases.items()},
            {k: result(k, c) for k, c in cands.items()}, None, None, "cpu"), seed=run)
        statuses = {o.status for o in outcomes}
        key = "reject" if "fail" in statuses else (
            "inconclusive" if "inconclusive" in statuses else "promote")
        counts[key] += 1
    return {k: v / runs for k, v in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--tests", type=int, default=20)
    parser.add_argument("--n", type=int, default=120)
    parser.add_argument("--margin", type=float, default=0.05)
    args = parser.parse_args()
    print(f"{args.tests} paired tests of {args.n} items each, margin {args.margin}, "
          f"{args.runs} simulated runs per row\n")
    print("| candidate | multiple_comparisons | rejected | inconclusive | promoted |")
    print("|---|---|---|---|---|")
    for label, eps, drop in (("A/A, no flips", 0.0, 0.0), ("A/A, 2% flips", 0.02, 0.0),
                             ("A/A, 5% flips", 0.05, 0.0),
                             (f"every suite {args.margin} worse", 0.0, args.margin)):
        for holm in (False, True):
            r = simulate(args.runs, args.tests, args.n, eps, drop, args.margin, holm, 0)
            print(f"| {label} | {'holm' if holm else 'none'} | {r['reject']:.3f} | "
                  f"{r['inconclusive']:.3f} | {r['promote']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
