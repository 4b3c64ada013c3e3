"""What stopping trials early saves a tune (issue 54, item 4), and the default tune's own
figures (issue 47's acceptance).

    .venv/bin/python benchmarks/tune_saving.py [--candidate int4] [--max-trials 8]
        [--max-hours 2] [--out FILE] [--stopped-only] [--scratch DIR]

Two runs of `workbench tune` in one scratch cache (empty artifact and result caches, the
real one's environments and converted model linked, as benchmarks/main_job.py):
1. the tune as the README runs it, each trial stopped where a gate fails past doubt;
2. the same tune with `--measure-all`, in the same cache and held to run 1's number of
   trials (so it tries no point run 1 did not): every build, the baseline and
   each trial's measured suites come from run 1, so it measures exactly what run 1 left
   out (a stopped trial's remaining suites and load test; evaluate's rerun of a stopped
   pair reuses what was measured).
Measuring every trial from cold would take about run 1 + run 2 (a little less: run 2 also
starts each stopped trial's engines again, counted in its `engine_start` seconds, which
are printed), so run 2's time is what stopping saved, and run 1 / (run 1 + run 2) the
ratio. Each run's wall time, exit code, outcome, trials (decision, stopping gates, what
was not measured, seconds) and where its time went are written to --out after each run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workbench.mechanisms.paths import link_shared_cache  # noqa: E402


def tune(scratch: Path, args: argparse.Namespace, measure_all: bool,
         max_trials: int | None = None) -> dict:
    """One timed tune in the scratch cache (its runs/ and MLflow store inside); run 2 is
    held to run 1's number of trials, so it measures those points and no new ones."""
    env = {**os.environ, "WORKBENCH_CACHE": str(scratch / "cache"),
           "MLFLOW_TRACKING_URI": f"sqlite:///{scratch}/mlflow.db", "PYTHONPATH": str(REPO)}
    cmd = [str(REPO / ".venv" / "bin" / "workbench"), "tune", "--candidate", args.candidate,
           "--max-trials", str(max_trials or args.max_trials), "--max-hours", str(args.max_hours),
           "--runs-dir", str(scratch / "runs"), *(["--measure-all"] if measure_all else [])]
    before = set((scratch / "runs").glob("*-tune-*"))
    start = time.perf_counter()
    with (scratch / f"tune-{'all' if measure_all else 'stopped'}.log").open("w") as log:
        proc = subprocess.run(cmd, env=env, cwd=scratch, stdout=log, stderr=subprocess.STDOUT)
    seconds = round(time.perf_counter() - start, 1)
    new = sorted(set((scratch / "runs").glob("*-tune-*")) - before)
    record = json.loads((new[-1] / "tune.json").read_text()) if new else {}
    return {"seconds": seconds, "exit": proc.returncode,
            "outcome": record.get("outcome", {}).get("status"),
            "trial": record.get("outcome", {}).get("trial"),
            "stopped": record.get("stopped"),
            "trials": [_row(r) for r in record.get("trials", {}).get("rows", [])],
            "confirmation": (record.get("confirmation") or {}).get("decision"),
            "by_kind": _by_kind(new[-1]) if new else {}}


def _same_trials(first: list[dict], then: list[dict]) -> bool:
    """Whether run 2 measured run 1's trials with as many looks each: with more of
    --max-hours left (its first looks come from the cache) it may take a second look run 1
    could not, and then part of run 2's time is not what stopping saved."""
    same = [(r["candidate"], r["looks"]) for r in first] == [
        (r["candidate"], r["looks"]) for r in then]
    if not same:
        print("run 2's trials or looks differ from run 1's: its time is not all saving")
    return same


def _row(r: dict) -> dict:
    return {"candidate": r["candidate"], "decision": r.get("decision"), "looks": r.get("looks"),
            "failing": r.get("failing_gates"), "stopped_by": r.get("stopped_by"),
            "not_measured": r.get("not_measured"), "seconds": r.get("evaluate_s"),
            "weights_mib": round(r["weights_bytes"] / 2**20, 1) if r.get("weights_bytes")
            else None}


def _by_kind(tune_dir: Path) -> dict[str, float]:
    """Seconds per kind of stage over every trial's timeline (timing.json)."""
    total: dict[str, float] = {}
    for timing in tune_dir.glob("*/timing.json"):
        for kind, seconds in json.loads(timing.read_text()).get("by_kind", {}).items():
            total[kind] = round(total.get(kind, 0.0) + seconds, 1)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", default="int4")
    parser.add_argument("--max-trials", type=int, default=8)
    parser.add_argument("--max-hours", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=Path("tune_saving.json"))
    parser.add_argument("--stopped-only", action="store_true",
                        help="Only run 1: the default tune's own figures")
    parser.add_argument("--scratch", type=Path, default=None, help=(
        "Keep the scratch folder here (its tune folders, plots and logs) instead of a "
        "temporary one removed at the end"))
    args = parser.parse_args()
    figures: dict = {}

    def keep(name: str, run: dict) -> None:
        figures[name] = run
        args.out.write_text(json.dumps(figures, indent=2))
        print(f"{name:<12} {run['seconds']:8.1f} s  exit {run['exit']}  {run['outcome']}  "
              f"{len(run['trials'])} trials", flush=True)

    with tempfile.TemporaryDirectory(prefix="wb-tune-") as tmp:
        scratch = args.scratch or Path(tmp)
        link_shared_cache(scratch / "cache")
        keep("stopped", tune(scratch, args, measure_all=False))
        tried = figures["stopped"]["trials"]
        if not tried or figures["stopped"]["exit"] not in (0, 1):
            print("run 1 measured no trial to compare: run 2 not started")
        elif not args.stopped_only:
            keep("the rest", tune(scratch, args, measure_all=True, max_trials=len(tried)))
            figures["same_trials"] = _same_trials(tried, figures["the rest"]["trials"])
            stopped, rest = figures["stopped"]["seconds"], figures["the rest"]["seconds"]
            figures["saved_s"] = rest
            figures["ratio"] = round(stopped / (stopped + rest), 3)
            args.out.write_text(json.dumps(figures, indent=2))
            print(f"saved {rest:.0f} s; stopped / measured in full = {figures['ratio']}")


if __name__ == "__main__":
    main()
