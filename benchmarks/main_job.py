"""Cold and warm wall time of the main job (`workbench evaluate --candidate int4`).

    .venv/bin/python benchmarks/main_job.py [--candidate int4] [--config configs/default.yaml]
        [--against OTHER_CHECKOUT] [--cold-only] [--out FILE]

"Cold" runs with empty artifact and result caches (a scratch cache folder that links the
real one's environments and converted model), so it quantises and measures both models;
"warm" repeats the job in that same scratch cache, which then reuses the quantised artifact
and the baseline's results. Also times a second `scripts/setup.sh`. Prints the figures,
and where the cold run's time went (its timing.json: each kind of stage, and the share of
the wall time an engine was answering the run's requests).

--against times another checkout's main job (its own `.venv/bin/workbench` and default
config, in a scratch cache of its own) right before this one's, on the same machine, and
says whether the two decided the same and scored every suite the same (each model's
score per suite, from both decision records).
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


def cold_and_warm(repo: Path, candidate: str, config: str, warm: bool
                  ) -> tuple[float, int, float | None, list[dict]]:
    """One checkout's main job in a scratch cache: cold, then warm (unless not asked); the
    wall times, the cold run's exit code and its decision records."""
    with tempfile.TemporaryDirectory(prefix="wb-bench-") as tmp:
        scratch = link_shared_cache(Path(tmp) / "cache")
        env = {**os.environ, "WORKBENCH_CACHE": str(scratch),
               "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db"}
        env["PYTHONPATH"] = str(repo)  # the shared environment's editable install points
        # at whichever checkout ran setup.sh last: each checkout runs its own package
        cmd = [str(repo / ".venv" / "bin" / "workbench"), "evaluate", "--candidate",
               candidate, "--config", config, "--runs-dir", f"{tmp}/runs"]
        cold_s, cold_rc = timed(cmd, env, Path(tmp))
        warm_s = timed(cmd, env, Path(tmp))[0] if warm else None
        records = [json.loads(r.read_text()) | {"_timing": _timing(r.parent)}
                   for r in sorted(Path(tmp, "runs").glob("*/decision.json"))]
    return cold_s, cold_rc, warm_s, records


def _timing(run_dir: Path) -> dict:
    f = run_dir / "timing.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def scores(record: dict) -> dict[tuple[str, str], float | None]:
    """Each model's headline score per suite (accuracy or the suite's own score)."""
    found = {}
    for suite, roles in record.get("suites", {}).items():
        for role, r in roles.items():
            if isinstance(r, dict):
                found[(suite, role)] = r.get("accuracy", r.get("score"))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", default="int4")
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    parser.add_argument("--against", type=Path, default=None,
                        help="another checkout (e.g. the current release), timed first")
    parser.add_argument("--cold-only", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help=(
        "Also write the cold run's figures as JSON: wall time, exit code, decision, each "
        "gate's status, each suite's scores and where its time went"))
    args = parser.parse_args()

    setup_s, setup_rc = timed(["bash", "scripts/setup.sh"], dict(os.environ), REPO)
    other = None
    if args.against:
        other = cold_and_warm(args.against.resolve(), args.candidate,
                              str(args.against.resolve() / "configs" / "default.yaml"),
                              not args.cold_only)
    cold_s, cold_rc, warm_s, records = cold_and_warm(REPO, args.candidate, args.config,
                                                     not args.cold_only)
    print(f"setup.sh (second run): {setup_s:6.1f} s  exit {setup_rc}")
    print(f"main job, cold:        {cold_s:6.1f} s  exit {cold_rc}")
    if warm_s is not None:
        print(f"main job, warm:        {warm_s:6.1f} s")
        print(f"warm / cold:           {warm_s / cold_s:6.2f}")
    print(f"decisions:             {[r['decision'] for r in records]}")
    print("\n".join(stage_lines(records[0]["_timing"] if records else {})))
    if args.out and records:
        args.out.write_text(json.dumps(figures(cold_s, cold_rc, records[0]), indent=2))
    if other is not None:
        print("\n".join(side_by_side(args.against, other, cold_s, records)))


def figures(cold_s: float, cold_rc: int, record: dict) -> dict:
    """The cold run as --out keeps it: comparable gate by gate with another run's."""
    return {"seconds": round(cold_s, 1), "exit": cold_rc, "decision": record.get("decision"),
            "device": record.get("device"), "early_stop": record.get("early_stop"),
            "gates": {g["gate"]: g["status"] for g in record.get("gates", [])},
            "scores": {f"{suite}/{role}": v for (suite, role), v in scores(record).items()},
            "by_kind": record["_timing"].get("by_kind", {})}


def side_by_side(against: Path, other: tuple[float, int, float | None, list[dict]],
                 cold_s: float, records: list[dict]) -> list[str]:
    o_cold, o_rc, o_warm, o_records = other
    lines = [f"\n{against} (timed first): cold {o_cold:.1f} s exit {o_rc}"
             + (f", warm {o_warm:.1f} s" if o_warm is not None else ""),
             f"this checkout / that one, cold: {cold_s / o_cold:.2f}"]
    if records and o_records:
        mine, theirs = scores(records[0]), scores(o_records[0])
        differ = {k: (theirs.get(k), mine.get(k)) for k in mine.keys() | theirs.keys()
                  if mine.get(k) != theirs.get(k)}
        lines.append(f"decision: {o_records[0]['decision']} there, {records[0]['decision']} "
                     f"here; suite scores: {len(mine)} here, "
                     + ("every one the same" if not differ else f"{len(differ)} differ: "
                        + ", ".join(f"{s}/{r} {a} -> {b}" for (s, r), (a, b) in
                                    sorted(differ.items()))))
        lines.append("\n".join(stage_lines(o_records[0]["_timing"])))
    return lines


def stage_lines(t: dict) -> list[str]:
    """A cold run's stages (timing.json, written by releases since issue 24): seconds per
    kind of stage and the share of the wall time an engine answered the run's requests."""
    if not t:
        return ["stages: no timing.json in this release"]
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
