"""`workbench evaluate` run twice with nothing changed: the second run's wall time against
the first's, and whether both records say the same.

    .venv/bin/python benchmarks/evaluate_rerun.py [--candidate int4] [--config FILE]

The first run is `evaluate --remeasure`: the candidate and its baseline's load are measured
anew (the quantised artifact and the baseline's suite results come from the cache when
present), which is the shortest a measuring run gets; a cold run (benchmarks/main_job.py)
also quantises and measures the baseline's suites. The second run is plain `evaluate`:
everything comes from the cache and no engine starts. Target: second / first <= 0.1.
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wb-rerun-") as tmp:
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db"}
        cmd = [str(REPO / ".venv" / "bin" / "workbench"), "evaluate", "--candidate",
               args.candidate, "--config", args.config, "--runs-dir", f"{tmp}/runs"]
        first_s, first_rc, _ = timed_run([*cmd, "--remeasure"], env, Path(tmp))
        second_s, second_rc, out = timed_run(cmd, env, Path(tmp))
        first, second = (json.loads(p.read_text())
                         for p in sorted(Path(tmp, "runs").glob("*/decision.json")))
        same = [k for k in SAME if json.dumps(first[k], sort_keys=True)
                == json.dumps(second[k], sort_keys=True)]
        engines = out.count("engine healthy")
    print(f"first (--remeasure):  {first_s:7.1f} s  exit {first_rc}  {first['decision']}")
    print(f"second (cached):      {second_s:7.1f} s  exit {second_rc}  {second['decision']}  "
          f"engines started: {engines}")
    print(f"second / first:       {second_s / first_s:7.3f}  (target <= 0.1)")
    print(f"sections equal:       {len(same)} of {len(SAME)}"
          + ("" if len(same) == len(SAME) else f"; differ: {set(SAME) - set(same)}"))


if __name__ == "__main__":
    main()
