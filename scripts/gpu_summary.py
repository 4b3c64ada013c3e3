"""The GPU check's record: one JSON file per part under OUT/parts, gathered into
OUT/summary.json and OUT/summary.txt (scripts/gpu_check.sh).

    python3 scripts/gpu_summary.py mark OUT PART STATUS SECONDS REASON
    python3 scripts/gpu_summary.py write OUT MODE        # exit 0: no part failed

A part is "ran" (every check it made passed), "failed" (a check failed, or it crashed or
ran out of time before writing its record: `mark` records that from the shell) or
"skipped" (it could not apply here, with the reason: one GPU for tensor parallel 2, no
vLLM, a helper of the workbench not written yet). Standard library only: it runs with
whatever python3 the machine has, before anything is installed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["PART_STATUSES", "check", "exit_status", "gather", "mark", "part_record",
           "render_text", "write_part", "write_summary"]

PART_STATUSES = ("ran", "failed", "skipped")
# The order the parts run in, so the summary reads as the run did.
PART_ORDER = ("environment", "probe", "quantise", "kernels", "main-job", "tp2")
NOTES = {"dry-run": "a dry run: the CPU stands in for the GPU, the models' widths are "
                    "divided by 16 (same layer counts), and nvidia-smi and NVML are recorded "
                    "as absent, not as failures; no figure here is a GPU's"}


def check(name: str, ok: bool, detail: Any = None) -> dict[str, Any]:
    """One pass/fail fact of a part; detail says what was seen."""
    return {"name": name, "ok": bool(ok), "detail": detail}


def part_record(part: str, status: str | None, seconds: float, *,
                checks: list[dict[str, Any]] | None = None,
                figures: dict[str, Any] | None = None, reason: str | None = None,
                headlines: list[str] | None = None) -> dict[str, Any]:
    """A part's record; status None: "ran" when every check passed, else "failed".
    headlines: the few lines summary.txt shows of the figures (all of them are in
    summary.json)."""
    checks = checks or []
    if status is None:
        status = "ran" if all(c["ok"] for c in checks) else "failed"
    if status not in PART_STATUSES:
        raise ValueError(f"status {status!r}: allowed {', '.join(PART_STATUSES)}")
    return {"part": part, "status": status, "seconds": round(float(seconds), 1),
            "reason": reason, "checks": checks, "headlines": headlines or [],
            "figures": figures or {}}


def write_part(out: Path, record: dict[str, Any]) -> Path:
    path = out / "parts" / f"{record['part']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=str))
    return path


def mark(out: Path, part: str, status: str, seconds: float, reason: str) -> Path:
    """A record written by the shell: a skipped part, or a helper that ended without one."""
    return write_part(out, part_record(part, status, seconds, reason=reason))


def gather(out: Path, mode: str) -> dict[str, Any]:
    """Every part's record, in run order, and the overall status."""
    parts = [json.loads(p.read_text()) for p in sorted((out / "parts").glob("*.json"))]
    rank = {name: i for i, name in enumerate(PART_ORDER)}
    parts.sort(key=lambda r: (rank.get(r["part"], len(rank)), r["part"]))
    failed = [r["part"] for r in parts if r["status"] == "failed"]
    return {"mode": mode, "note": NOTES.get(mode),
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "status": "failed" if failed or not parts else "passed", "failed_parts": failed,
            "seconds": round(sum(r["seconds"] for r in parts), 1), "parts": parts}


def _line(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 160 else text[:157] + "..."


def render_text(summary: dict[str, Any]) -> str:
    """summary.txt: one block per part, its failed checks first, then its figures."""
    lines = [f"GPU check ({summary['mode']}): {summary['status']}, "
             f"{summary['seconds']} s in the parts"]
    if summary.get("note"):
        lines.append(summary["note"])
    for r in summary["parts"]:
        lines.append(f"\n[{r['status']}] {r['part']} ({r['seconds']} s)"
                     + (f": {r['reason']}" if r["reason"] else ""))
        for c in sorted(r["checks"], key=lambda c: c["ok"]):
            lines.append(f"  {'ok  ' if c['ok'] else 'FAIL'} {c['name']}"
                         + (f": {_line(c['detail'])}" if c["detail"] is not None else ""))
        lines += [f"  {h}" for h in r.get("headlines") or []]
        if not r.get("headlines"):
            lines += [f"  {key}: {_line(value)}" for key, value in r["figures"].items()]
    return "\n".join(lines) + "\n"


def exit_status(summary: dict[str, Any]) -> int:
    return 0 if summary["status"] == "passed" else 1


def write_summary(out: Path, mode: str) -> dict[str, Any]:
    summary = gather(out, mode)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "summary.txt").write_text(render_text(summary))
    return summary


def main(argv: list[str]) -> int:
    if len(argv) == 6 and argv[0] == "mark":
        _, out, part, status, seconds, reason = argv
        mark(Path(out), part, status, float(seconds), reason)
        return 0
    if len(argv) == 3 and argv[0] == "write":
        summary = write_summary(Path(argv[1]), argv[2])
        print(render_text(summary), end="")
        return exit_status(summary)
    print("usage: gpu_summary.py mark OUT PART STATUS SECONDS REASON | write OUT MODE",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
