"""The main job stopped early against the same job measured in full (issue 54).

    .venv/bin/python benchmarks/early_stop.py [--candidate int4] [--out FILE]
        [--skip-cached-all | --cached-only] [--then CANDIDATE ...]

Four runs of `workbench evaluate --candidate int4`, each timed as a whole process on this
machine, one after the other:
1. cold, `--measure-all`: empty artifact and result caches (a scratch cache that links the
   real one's environments, converted model and compile cache, as benchmarks/main_job.py);
2. cold, as the README runs it (stopped where a gate fails past doubt), in a second empty
   scratch cache;
3. the baseline cached (run 1's scratch cache with its cached pair dropped), stopped;
4. the same with `--measure-all` (left out with --skip-cached-all).

Prints each run's wall time, exit code and decision, the two ratios (stopped over measured
in full, cold and with the baseline cached), and each stopped run's gates held against the
full run's: every gate the stopped run judged (not `not_measured`) with its status in both,
and whether the failed gates agree. Every figure is written to --out as JSON after each
run, so a run cut short keeps the ones before it.

--cached-only leaves run 1 out: run 2 seeds the cache (the baseline is measured in full
either way), then runs 3 and 4 give the ratio with the baseline cached, the stopped runs held
against run 4. --then runs each named candidate after them, as the README runs it, in the
same cache (the baseline cached): e.g. `--then int8` shows whether a candidate that passes
is measured in full (no `early_stop`) and promotes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workbench.mechanisms.paths import link_shared_cache  # noqa: E402


def evaluate(scratch: Path, candidate: str, measure_all: bool) -> dict:
    """One timed run in a scratch cache folder (its runs/ and MLflow store inside)."""
    env = {**os.environ, "WORKBENCH_CACHE": str(scratch / "cache"),
           "MLFLOW_TRACKING_URI": f"sqlite:///{scratch}/mlflow.db", "PYTHONPATH": str(REPO)}
    cmd = [str(REPO / ".venv" / "bin" / "workbench"), "evaluate", "--candidate", candidate,
           "--runs-dir", str(scratch / "runs"), *(["--measure-all"] if measure_all else [])]
    before = set((scratch / "runs").glob("*/decision.json"))
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=scratch, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    seconds = round(time.perf_counter() - start, 1)
    new = sorted(set((scratch / "runs").glob("*/decision.json")) - before)
    record = json.loads(new[-1].read_text()) if new else {}
    timing = new[-1].parent / "timing.json" if new else None
    return {"seconds": seconds, "exit": proc.returncode, "decision": record.get("decision"),
            "early_stop": record.get("early_stop"),
            # the looks taken, and why a second one was not (policy.looks.skipped)
            "looks": (record.get("policy") or {}).get("looks"),
            "gates": {g["gate"]: g["status"] for g in record.get("gates", [])
                      if not g.get("informational")},
            "by_kind": (json.loads(timing.read_text()).get("by_kind", {})
                        if timing and timing.is_file() else {})}


def drop_cached_pairs(scratch: Path) -> None:
    """Keep the artifact and the baseline's results; measure the candidate again."""
    for pair in (scratch / "cache" / "results").glob("pair-*"):
        shutil.rmtree(pair)


def against_full(stopped: dict, full: dict) -> dict:
    """The gates the stopped run judged, each with its status there and in the full run."""
    judged = {g: s for g, s in stopped["gates"].items() if s != "not_measured"}
    failed_stopped = sorted(g for g, s in judged.items() if s == "fail")
    failed_full = sorted(g for g, s in full["gates"].items() if s == "fail")
    return {"same_decision": stopped["decision"] == full["decision"],
            "judged": {g: [s, full["gates"].get(g)] for g, s in sorted(judged.items())},
            "differ": sorted(g for g, s in judged.items() if full["gates"].get(g) != s),
            "failed_here": failed_stopped, "failed_in_full": failed_full,
            "failed_here_also_fail_in_full": set(failed_stopped) <= set(failed_full)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", default="int4")
    parser.add_argument("--out", type=Path, default=Path("early_stop.json"))
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument("--skip-cached-all", action="store_true")
    runs.add_argument("--cached-only", action="store_true")
    parser.add_argument("--then", nargs="*", default=[])
    args = parser.parse_args()
    figures: dict = {}

    def keep(name: str, run: dict) -> None:
        figures[name] = run
        args.out.write_text(json.dumps(figures, indent=2))
        print(f"{name:<24} {run['seconds']:8.1f} s  exit {run['exit']}  "
              f"{run['decision']}  stopped: {bool(run['early_stop'])}", flush=True)

    with tempfile.TemporaryDirectory(prefix="wb-stop-a-") as a, \
            tempfile.TemporaryDirectory(prefix="wb-stop-b-") as b:
        for scratch in (Path(a), Path(b)):
            link_shared_cache(scratch / "cache")
        seeded = Path(b) if args.cached_only else Path(a)
        if not args.cached_only:
            keep("cold, measure-all", evaluate(Path(a), args.candidate, True))
        keep("cold, stopped", evaluate(Path(b), args.candidate, False))
        drop_cached_pairs(seeded)
        keep("baseline cached, stopped", evaluate(seeded, args.candidate, False))
        if not args.skip_cached_all:
            drop_cached_pairs(seeded)
            keep("baseline cached, all", evaluate(seeded, args.candidate, True))
        for other in args.then:
            keep(f"{other}, baseline cached", evaluate(seeded, other, False))
    summarise(figures)
    args.out.write_text(json.dumps(figures, indent=2))
    print(json.dumps({k: v for k, v in figures.items() if "vs full" in k or "ratio" in k},
                     indent=2))


def summarise(figures: dict) -> None:
    """Each stopped run against the run measured in full, and the ratios of their times."""
    full = figures.get("cold, measure-all") or figures.get("baseline cached, all")
    for name in ("cold, stopped", "baseline cached, stopped"):
        if full and name in figures:
            figures[f"{name} vs full"] = against_full(figures[name], full)
    if "cold, measure-all" in figures:
        figures["ratio cold"] = round(
            figures["cold, stopped"]["seconds"] / figures["cold, measure-all"]["seconds"], 3)
    if "baseline cached, all" in figures:
        figures["ratio baseline cached"] = round(
            figures["baseline cached, stopped"]["seconds"]
            / figures["baseline cached, all"]["seconds"], 3)


if __name__ == "__main__":
    main()
