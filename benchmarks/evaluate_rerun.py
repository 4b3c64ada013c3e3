"""`workbench evaluate` run twice with nothing changed: the second run's wall time against
the first's, and whether both records say the same.

    .venv/bin/python benchmarks/evaluate_rerun.py [--candidate int4] [--config FILE]
                                                  [--first-from RUN_DIR]

The first run is `evaluate --remeasure`: the candidate and its baseline's load are measured
anew (the quantised artifact and the baseline's suite results come from the cache when
present), which is the shortest a measuring run gets; a cold run (benchmarks/main_job.py)
also quantises and measures the baseline's suites. The second run is plain `evaluate`:
everything comes from the cache and no engine starts. Target: second / first <= 0.1.

--first-from RUN_DIR takes the first run from a finished run folder instead of measuring
it again (its timing.json and decision.json): an `evaluate` run, or a candidate's folder
in a sweep, which runs the same stages; its measurement must be the one now cached.
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

# What two runs of the same measurement must agree on (created_at, run_dir, reused and the
# MLflow ids differ by nature).
SAME = ("decision", "gates", "suites", "fidelity", "load", "headroom", "cost", "quantization")


def timed_run(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - start, proc.returncode, proc.stdout + proc.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", default="int4")
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    parser.add_argument("--first-from", type=Path, default=None, metavar="RUN_DIR")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wb-rerun-") as tmp:
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db"}
        cmd = [str(REPO / ".venv" / "bin" / "workbench"), "evaluate", "--candidate",
               args.candidate, "--config", args.config, "--runs-dir", f"{tmp}/runs"]
        if args.first_from is None:
            first_s, first_rc, _ = timed_run([*cmd, "--remeasure"], env, Path(tmp))
        second_s, second_rc, out = timed_run(cmd, env, Path(tmp))
        records = [json.loads(p.read_text())
                   for p in sorted(Path(tmp, "runs").glob("*/decision.json"))]
        if args.first_from is not None:
            records.insert(0, json.loads((args.first_from / "decision.json").read_text()))
            first_s = json.loads((args.first_from / "timing.json").read_text())["wall_time_s"]
            first_rc = records[0]["exit_code"]
        first, second = records
        same = [k for k in SAME if json.dumps(first[k], sort_keys=True)
                == json.dumps(second[k], sort_keys=True)]
        engines = out.count("engine healthy")
    label = f"first ({args.first_from or '--remeasure'})"
    print(f"{label}: {first_s:7.1f} s  exit {first_rc}  {first['decision']}")
    print(f"second (cached): {second_s:7.1f} s  exit {second_rc}  {second['decision']}  "
          f"engines started: {engines}")
    print(f"second / first: {second_s / first_s:7.3f}  (target <= 0.1)")
    print(f"sections equal: {len(same)} of {len(SAME)}"
          + ("" if len(same) == len(SAME) else f"; differ: {set(SAME) - set(same)}"))


if __name__ == "__main__":
    main()
