"""Build every candidate of a config from scratch and print their manifest figures.

    .venv/bin/python benchmarks/quantize_candidates.py [--config configs/default.yaml]

Runs `workbench quantize --all` with an empty artifact cache (a scratch cache folder that
links the real one's environments and converted model), then prints one Markdown row per
candidate from the manifests: format, size, compression ratio, wall time, peak memory and
the held-out perplexity against the baseline. This is the table in docs/benchmarks.md.
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


def row(q: dict) -> str:
    m = q["manifest"]
    fid = m.get("fidelity") or {}
    ppl = (f"{fid['baseline_perplexity']:.2f} → {fid['candidate_perplexity']:.2f} "
           f"(×{fid['perplexity_ratio']:.3f})" if fid else "— (no new weights)")
    wall = f"{m['wall_time_s']:.0f}" if "wall_time_s" in m else "—"
    peak = f"{m['peak_rss_mb'] / 1024:.2f}" if "peak_rss_mb" in m else "—"
    return (f"| {q['candidate']} | {m['format']['label']} | {m['size_bytes'] / 1e6:.0f} | "
            f"{m['compression_ratio']:.2f} | {wall} | {peak} | {ppl} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wb-qcand-") as tmp:
        scratch = link_shared_cache(Path(tmp) / "cache")
        env = {**os.environ, "WORKBENCH_CACHE": str(scratch)}
        started = time.perf_counter()
        proc = subprocess.run([str(REPO / ".venv" / "bin" / "workbench"), "quantize", "--all",
                               "--config", args.config, "--runs-dir", f"{tmp}/runs"],
                              env=env, cwd=tmp, capture_output=True, text=True)
        total = time.perf_counter() - started
        if proc.returncode != 0:
            sys.exit(proc.stdout[-3000:] + proc.stderr[-3000:])
        print(proc.stdout[proc.stdout.find("candidates of"):])
        summary = json.loads(next(Path(tmp, "runs").glob("*/quantize-summary.json"))
                             .read_text())
    print(f"all candidates, from scratch: {total:.0f} s\n")
    print("| candidate | format | size MB | compression | wall s | peak RSS GiB | "
          "held-out perplexity, baseline → candidate |")
    print("|---|---|---|---|---|---|---|")
    for q in summary:
        print(row(q))


if __name__ == "__main__":
    main()
