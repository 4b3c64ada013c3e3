"""Real A/A latency runs: does the interval contain "no change" for an identical model?

    .venv/bin/python benchmarks/latency_aa.py [--runs 3] [--rounds 2] [--simulate-only]

Runs `workbench evaluate` on the default model against itself (`recipe: none`: the same
weights and engine arguments) --runs times, with the default config's CPU `interactive`
load profile measured in --rounds engine sessions per model. For every latency ratio the
gates judge (TTFT, TPOT and end-to-end p50, output throughput, at each level) it prints
the between-session interval the gates use and, from the first session's per-request data
alone, the within-session bootstrap interval used before (one session each), and counts how
many of each contain 1.0. First it simulates the same at 95%: how often each kind of
interval holds 1.0 when sessions differ by more than requests within a session do. A
scratch cache folder links the real one's environments and model; the first run measures
the baseline's suite and caches it, the load test runs in every session. Results:
docs/gates.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workbench.gate.latency import ratio_interval  # noqa: E402
from workbench.loadtest.results import per_request_ms  # noqa: E402
from workbench.mechanisms.paths import link_shared_cache  # noqa: E402

METRICS = {"ttft_p50_ms": "ttft", "tpot_p50_ms": "tpot", "e2el_p50_ms": "e2el",
           "output_throughput": None}
CONFIG = """
model: {{name: smollm2-135m-instruct, path: default}}
candidates:
  same: {{recipe: none}}
calibration: {{files: [{repo}/calibration_data/shakespeare_milton.jsonl]}}
engine: {{max_model_len: 2048, enforce_eager: true, kv_cache_space_gib: 2}}
suites: [arithmetic]
profile: smoke
load:
  profile: interactive
  rounds: {rounds}
  profiles:
    interactive:
      concurrency: [1, 8]
      num_prompts: 16
      max_duration_s: 120
      prompt_tokens: {{distribution: lognormal, median: 128, sigma: 0.5, min: 48, max: 384}}
      output_tokens: {{distribution: lognormal, median: 48, sigma: 0.4, min: 16, max: 96}}
      shared_prefix_tokens: 32
      warmup_prompts: 2
gates: gates.yaml
tracking: {{experiment: latency-aa}}
"""
GATES = "latency:\n" + "".join(
    f"  - {{metric: {m}, {'min' if m == 'output_throughput' else 'max'}_ratio: 1.0}}\n"
    for m in METRICS)


def within_session(run_dir: Path, key: str, metric: str) -> tuple[float, float] | None:
    """The per-request bootstrap interval of the first sessions alone (p50 metrics)."""
    if METRICS[metric] is None:
        return None
    raws = [json.loads((run_dir / role / "load" / f"bench-{key}.json").read_text())
            for role in ("baseline", "candidate")]
    b, c = (per_request_ms(r, METRICS[metric]) for r in raws)
    return ratio_interval(b, c, 50, 0.95, 10000, 0)


def simulate(runs: int = 4000) -> None:
    """Coverage of 1.0 by A/A intervals, per-session figures drawn log-normal: a session
    effect (sd s) times within-session noise (sd w, what a within-session bootstrap sees)."""
    from workbench.gate.latency import session_ratio_interval

    rng = np.random.default_rng(0)
    print("| session sd / within sd | one session each, within-session interval | "
          "2 + 2 sessions, t interval | 3 + 3 sessions, t interval |")
    print("|---|---|---|---|")
    w = 0.03
    for s in (0.0, 0.03, 0.08):
        cells = []
        naive = 0
        for _ in range(runs):
            b, c = np.exp(rng.normal(0, s, 2) + rng.normal(0, w, 2))
            naive += abs(math.log(c / b)) <= 1.96 * w * math.sqrt(2)
        cells.append(f"{naive / runs:.3f}")
        for sessions in (2, 3):
            hit = 0
            for _ in range(runs):
                draw = [list(np.exp(rng.normal(0, s, sessions) + rng.normal(0, w, sessions)))
                        for _ in range(2)]
                _, (low, high) = session_ratio_interval(draw[0], draw[1], 0.95)
                hit += low <= 1.0 <= high
            cells.append(f"{hit / runs:.3f}")
        print(f"| {s / w:.1f} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--simulate-only", action="store_true")
    args = parser.parse_args()
    simulate()
    if args.simulate_only:
        return
    work = Path(tempfile.mkdtemp(prefix="latency-aa-"))
    (work / "config.yaml").write_text(CONFIG.format(repo=REPO, rounds=args.rounds))
    (work / "gates.yaml").write_text(GATES)
    env = {**os.environ, "WORKBENCH_CACHE": str(link_shared_cache(work / "cache"))}
    between, within = [], []
    for run in range(args.runs):
        subprocess.run([sys.executable, "-m", "workbench.cli", "evaluate", "--candidate",
                        "same", "--config", "config.yaml", "--runs-dir", "runs"], cwd=work,
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run_dir = sorted((work / "runs").glob("*-same"))[-1]
        record = json.loads((run_dir / "decision.json").read_text())
        for g in record["gates"]:
            metric, key = g["gate"].split(":")[1], g["gate"].split("@")[1]
            low, high = g["evidence"]["ratio_interval"]
            between.append(low <= 1.0 <= high)
            inner = within_session(run_dir, key, metric)
            shown = f"[{inner[0]:.3f}, {inner[1]:.3f}]" if inner else "-"
            if inner:
                within.append(inner[0] <= 1.0 <= inner[1])
            sessions = {role: np.round(g["evidence"][f"{role}_rounds"], 2).tolist()
                        for role in ("baseline", "candidate")}
            print(f"run {run + 1} {metric}@{key}: ratio {g['value']:.3f} between-session "
                  f"[{low:.3f}, {high:.3f}] sessions {sessions}; within first session "
                  f"{shown}", flush=True)
    print(f"between-session intervals containing 1.0: {sum(between)} of {len(between)}")
    print(f"within-session (first session) intervals containing 1.0: {sum(within)} of "
          f"{len(within)}")


if __name__ == "__main__":
    main()
