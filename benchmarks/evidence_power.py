"""Can the shipped smoke sample sizes decide the default policy's margins?

    .venv/bin/python benchmarks/evidence_power.py [--config configs/default.yaml]
        [--profile smoke|full] [--flip-rates 0,0.02,0.05] [--gates arithmetic,advbench]

For every paired gate of the config's policy (quality, safety, structured, health), at the
number of items the config's profile runs: the smallest drop the gate could detect when
nothing changed (no flips: workbench.gate.paired.evidence_strength, as the record reports it),
and, by simulation, how often an A/A run passes, is inconclusive or fails when the re-run
flips a share of items either way (a candidate identical in truth: greedy decoding that is
not bit-exact across engine sessions, or a quantised one that changes some answers each
way without changing accuracy: a W8A8 int8 checkpoint of the default model flipped 17 of
120 arithmetic answers, docs/benchmarks.md). Prints a Markdown table (docs/gates.md).
"""

from __future__ import annotations

import argparse

import numpy as np

from workbench.config.gate_policy import load_gate_policy
from workbench.config.run_config import RunConfig, load_config
from workbench.gate.gates import non_inferiority
from workbench.gate.paired import evidence_strength, paired_delta
from workbench.suites.definition import load_suite

FLIP_RATES = (0.0, 0.02, 0.05)
RUNS = 200
BASE_RATE = 0.6  # the baseline's share of right (or healthy) items in the simulation


def aa_outcomes(n: int, margin: float, flip_rate: float, confidence: float,
                rng: np.random.Generator) -> dict[str, float]:
    counts = {"pass": 0, "inconclusive": 0, "fail": 0}
    for run in range(RUNS):
        base = (rng.random(n) < BASE_RATE).astype(float)
        flip = rng.random(n) < flip_rate
        cand = np.where(flip, 1 - base, base)
        d = paired_delta(list(base), list(cand), confidence, 1000, run)
        counts[non_inferiority(d, margin)] += 1
    return {k: v / RUNS for k, v in counts.items()}


def gates_and_sizes(cfg: RunConfig) -> list[tuple[str, int, float]]:
    policy = load_gate_policy(cfg.resolve(cfg.gates))
    suites = {run: s for s in (load_suite(n) for n in cfg.suites) for run, _ in s.spec.runs()}
    sizes = {name: len(s.sample(cfg.profile, cfg.seed)) for name, s in suites.items()}
    kinds = {name: s.spec.kind for name, s in suites.items()}
    rows = [(f"{section}:{g.suite}", sizes[g.suite], g.max_drop)
            for section, g in policy.paired(kinds) if g.suite in sizes]
    if policy.health is not None:
        generating = [n for n, s in suites.items() if s.generates]
        rows += [(f"health:{n}", sizes[n], policy.health.max_drop) for n in generating]
        if policy.health.pooled_max_drop is not None:
            rows.append(("health:(pooled)", sum(sizes[n] for n in generating),
                         policy.health.pooled_max_drop))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--profile", choices=["smoke", "full"], default=None,
                        help="the suites' item profile (default: the config's)")
    parser.add_argument("--flip-rates", default=",".join(map(str, FLIP_RATES)),
                        help="comma-separated chances that an item flips either way")
    parser.add_argument("--gates", default="",
                        help="comma-separated suites to simulate (default: every gate)")
    args = parser.parse_args()
    cfg = load_config(args.config)
    if args.profile is not None:
        cfg = cfg.with_profile(args.profile)
    rates = [float(r) for r in args.flip_rates.split(",")]
    wanted = {g for g in args.gates.split(",") if g}
    confidence = load_gate_policy(cfg.resolve(cfg.gates)).confidence
    rng = np.random.default_rng(0)
    print(f"profile {cfg.profile}, confidence {confidence}, {RUNS} simulated A/A runs per "
          "cell, baseline right on 60% of items")
    print("| gate | n | margin | detectable drop (no flips) | A/A pass / inconclusive / "
          "fail at " + ", ".join(f"{e:.0%}" for e in rates) + " flips |")
    print("|---|---|---|---|---|")
    every = [1.0] * len(rates)
    for name, n, margin in gates_and_sizes(cfg):
        if wanted and name.split(":", 1)[1] not in wanted:
            continue
        same = paired_delta([1.0] * n, [1.0] * n, confidence, 1000, 0)
        detectable = evidence_strength(same, margin, confidence, "pass")["detectable_drop"]
        cells = []
        for i, rate in enumerate(rates):
            o = aa_outcomes(n, margin, rate, confidence, rng)
            cells.append(f"{o['pass']:.2f} / {o['inconclusive']:.2f} / {o['fail']:.2f}")
            every[i] *= o["pass"]
        print(f"| `{name}` | {n} | {margin} | {detectable:.3f} | " + "; ".join(cells) + " |")
    # promote needs every counted gate to pass; the suites' runs are independent, though
    # a suite's score and its health share items, so this product is a rough guide
    print("| every gate above passes (product) | | | | "
          + "; ".join(f"{p:.3f}" for p in every) + " |")


if __name__ == "__main__":
    main()
