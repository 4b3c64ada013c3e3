"""bf16 against the dtype this machine computes fast in, for the quantiser and the engine.

    .venv/bin/python benchmarks/compute_dtype.py [--part build|engine|all]
        [--recipes w8a8-int8,w4a16] [--samples 128] [--suite arithmetic] [--dtypes ...]

build: each recipe quantised from scratch from the config's model (the default:
SmolLM2-135M-Instruct) in each dtype, by the workbench's own quantise stage (a scratch
cache; the compute dtype forced per build), with `--samples` calibration passages (the
config's 128 by default; fewer gives the ratio in less time). Prints wall time, oneshot
time and the held-out perplexity per build, and the ratio to bf16.

engine: the config's model served in each dtype: TPOT at one request in flight (`vllm bench
serve`, 16 requests) and a suite's items per second at the suites' eight in flight.

The dtype the workbench chooses here is printed first (mechanisms/host.py, fast_dtype); run
under WORKBENCH_CPU_ISA_CAP=avx2 to measure an AVX-512 machine as an AVX2 one. Figures in
docs/benchmarks.md, "Compute dtype".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workbench.config.run_config import Candidate, LoadProfile, load_config  # noqa: E402
from workbench.loadtest.bench import level_requests, run_load_test  # noqa: E402
from workbench.mechanisms.digests import folder_digest  # noqa: E402
from workbench.mechanisms.host import cpu_vector_isa, fast_dtype, native_bf16  # noqa: E402
from workbench.mechanisms.paths import cache_root, link_shared_cache  # noqa: E402
from workbench.quantize import build  # noqa: E402
from workbench.serve.device import CPU_IN_FLIGHT  # noqa: E402
from workbench.serve.engine import EngineServer  # noqa: E402
from workbench.suites.definition import load_suite  # noqa: E402
from workbench.suites.runner import run_suite  # noqa: E402

SHARED = cache_root()


def build_row(cfg, recipe: str, dtype: str, tmp: Path) -> dict:
    """One recipe built from scratch computing in `dtype` (a fresh scratch cache)."""
    os.environ["WORKBENCH_CACHE"] = str(SHARED)  # each build's scratch links the real cache
    os.environ["WORKBENCH_CACHE"] = str(link_shared_cache(tmp / f"cache-{recipe}-{dtype}"))
    cand = Candidate(recipe=recipe, group_size=64 if recipe == "w4a16" else None)  # type: ignore[arg-type]
    model_dir = cfg.model.resolved_path(cfg.base_dir)
    started = time.perf_counter()
    with mock.patch.object(build, "fast_dtype", lambda _device: dtype):
        q = build.quantize(cfg, recipe, cand, model_dir, folder_digest(model_dir),
                           tmp / f"{recipe}-{dtype}.log",
                           lambda line: print(f"    {line}", end="\r", flush=True), "cpu")
    m = q.manifest
    assert m["compute_dtype"] == dtype, m.get("compute_dtype")
    return {"recipe": recipe, "dtype": dtype, "wall_s": time.perf_counter() - started,
            "oneshot_s": m["oneshot_s"], "ppl": (m.get("fidelity") or {}).get(
                "candidate_perplexity"), "base_ppl": (m.get("fidelity") or {}).get(
                "baseline_perplexity"), "size_mb": m["size_bytes"] / 1e6}


def engine_row(cfg, dtype: str, suite_name: str, tmp: Path) -> dict:
    """TPOT at c1 and a suite's items/s at the suites' batch, served in `dtype`."""
    engine = cfg.engine.model_copy(update={"dtype": dtype})
    model_dir = cfg.model.resolved_path(cfg.base_dir)
    suite = load_suite(suite_name)
    items = suite.sample(cfg.profile, cfg.seed)
    with EngineServer(model_dir, "m", engine, tmp / f"server-{dtype}.log") as server:
        profile = LoadProfile(concurrency=[1], num_prompts=16, prompt_tokens=128,
                              output_tokens=64, warmup_prompts=2)
        load = run_load_test(server.base_url, "m", model_dir, profile, tmp / f"load-{dtype}",
                             level_requests(profile, None, engine.max_model_len),
                             ceiling=False)
        started = time.perf_counter()
        result = run_suite(server.base_url, "m", suite, items, seed=cfg.seed,
                           sink=tmp / f"items-{dtype}.jsonl", concurrency=CPU_IN_FLIGHT)
        suite_s = time.perf_counter() - started
    level = load.levels[0]
    return {"dtype": dtype, "tpot_p50_ms": level.tpot_ms["p50"],
            "ttft_p50_ms": level.ttft_ms["p50"], "items": len(items),
            "items_per_s": len(items) / suite_s, "accuracy": result.accuracy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    parser.add_argument("--part", choices=("build", "engine", "all"), default="all")
    parser.add_argument("--recipes", default="w8a8-int8")
    parser.add_argument("--samples", type=int, default=None)
    parser.add_argument("--suite", default="arithmetic")
    parser.add_argument("--dtypes", default=None, help="default: bfloat16 and the chosen one")
    args = parser.parse_args()
    cfg = load_config(args.config)
    if args.samples:
        cfg = cfg.model_copy(update={"calibration": cfg.calibration.model_copy(
            update={"num_samples": args.samples})})
    chosen = fast_dtype("cpu")
    dtypes = args.dtypes.split(",") if args.dtypes else list(dict.fromkeys(["bfloat16",
                                                                              chosen]))
    print(f"CPU: vector ISA {cpu_vector_isa()}, native bf16 {native_bf16()}, chosen dtype "
          f"{chosen}; cap {os.environ.get('WORKBENCH_CPU_ISA_CAP', 'none')}; "
          f"{os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="wb-dtype-") as scratch:
        tmp = Path(scratch)
        if args.part in ("build", "all"):
            print(f"\nbuilds ({cfg.calibration.num_samples} x {cfg.calibration.seq_len} "
                  "calibration tokens)")
            print("| recipe | dtype | wall s | oneshot s | held-out ppl (baseline) | size MB |"
                  " × bf16 |")
            print("|---|---|---|---|---|---|---|")
            rows = [build_row(cfg, r, d, tmp) for r in args.recipes.split(",") for d in dtypes]
            for row in rows:
                base = next(x for x in rows if x["recipe"] == row["recipe"])
                print(f"| {row['recipe']} | {row['dtype']} | {row['wall_s']:.0f} | "
                      f"{row['oneshot_s']:.0f} | {row['ppl']} ({row['base_ppl']}) | "
                      f"{row['size_mb']:.0f} | {base['wall_s'] / row['wall_s']:.1f} |")
        if args.part in ("engine", "all"):
            print(f"\nengine ({cfg.model.name}, enforce_eager {cfg.engine.enforce_eager})")
            print("| dtype | TPOT p50 ms (c1) | TTFT p50 ms (c1) | suite items/s (8 in flight) "
                  "| accuracy |")
            print("|---|---|---|---|---|")
            for d in dtypes:
                e = engine_row(cfg, d, args.suite, tmp)
                print(f"| {d} | {e['tpot_p50_ms']:.1f} | {e['ttft_p50_ms']:.0f} | "
                      f"{e['items_per_s']:.2f} ({e['items']} items) | {e['accuracy']:.3f} |")
    print(json.dumps({"chosen": chosen}))


if __name__ == "__main__":
    main()
