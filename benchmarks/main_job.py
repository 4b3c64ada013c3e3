"""Cold and warm wall time of the main job (`workbench evaluate --candidate int4`).

    .venv/bin/python benchmarks/main_job.py [--candidate int4] [--config configs/default.yaml]

"Cold" runs with empty artifact and result caches (a scratch cache folder that links the
real one's environments and converted model), so it quantises and measures both models;
"warm" repeats the job in that same scratch cache, which then reuses the quantised artifact
and the baseline's results. Also times a second `scripts/setup.sh`. Prints the figures,
and where the cold run's time went (its timing.json: each kind of stage, and the share of
the wall time an engine was answering the run's requests). Run it from each checkout to
compare releases side by side.
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


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", default="int4")
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    args = parser.parse_args()

    setup_s, setup_rc = timed(["bash", "scripts/setup.sh"], dict(os.environ), REPO)
    with tempfile.TemporaryDirectory(prefix="wb-bench-") as tmp:
        scratch = link_shared_cache(Path(tmp) / "cache")
        env = {**os.environ, "WORKBENCH_CACHE": str(scratch),
               "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db"}
        cmd = [str(REPO / ".venv" / "bin" / "workbench"), "evaluate", "--candidate",
               args.candidate, "--config", args.config, "--runs-dir", f"{tmp}/runs"]
        cold_s, cold_rc = timed(cmd, env, Path(tmp))
        warm_s, warm_rc = timed(cmd, env, Path(tmp))
        records = sorted(Path(tmp, "runs").glob("*/decision.json"))
        decisions = [json.loads(r.read_text())["decision"] for r in records]
        stages = stage_lines(records[0].parent / "timing.json") if records else []
    print(f"setup.sh (second run): {setup_s:6.1f} s  exit {setup_rc}")
    print(f"main job, cold:        {cold_s:6.1f} s  exit {cold_rc}")
    print(f"main job, warm:        {warm_s:6.1f} s  exit {warm_rc}")
    print(f"warm / cold:           {warm_s / cold_s:6.2f}")
    print(f"decisions:             {decisions}")
    print("\n".join(stages))


def stage_lines(timing: Path) -> list[str]:
    """The cold run's stages (timing.json, written by releases since issue 24): seconds per
    kind of stage and the share of the wall time an engine answered the run's requests."""
    if not timing.is_file():
        return ["stages: no timing.json stages in this release"]
    t = json.loads(timing.read_text())
    if "by_kind" not in t:
        return [f"stages: this release's timing.json has the wall time only "
                f"({t.get('wall_time_s', 0):.1f} s)"]
    lines = [f"cold run's stages (timing.json, {t['wall_time_s']:.1f} s):"]
    lines += [f"  {kind:<13} {seconds:7.1f} s" for kind, seconds in
              sorted(t["by_kind"].items(), key=lambda kv: -kv[1]) if kind != "stage"]
    lines.append(f"  engine busy   {t['engine_busy_share']:.0%} of the wall time")
    return lines


if __name__ == "__main__":
    main()
