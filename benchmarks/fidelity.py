"""Token-level fidelity of several candidates to the baseline, through the engine.

    .venv/bin/python benchmarks/fidelity.py [--candidates int4 fp8 kv-fp8 ...]
                                            [--suite heldout-text] [--profile smoke]

Serves the baseline and then each candidate (quantising it first if the artifact cache does
not have it) through vLLM, runs only the fidelity suite on each, and prints KL divergence,
top-1 agreement and perplexity against the baseline: the same figures `workbench evaluate`
records, without the generation suites and the load test, so that candidates whose
generation is slow on this CPU (FP8 weights are emulated) can still be compared.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workbench.config.run_config import load_config  # noqa: E402
from workbench.mechanisms.digests import folder_digest  # noqa: E402
from workbench.quantize.build import quantize  # noqa: E402
from workbench.serve.engine import EngineServer  # noqa: E402
from workbench.suites.definition import load_suite  # noqa: E402
from workbench.suites.runner import logprobs_file, run_suite  # noqa: E402
from workbench.suites.scorers.fidelity import compare_fidelity  # noqa: E402


def score(cfg, model_dir: Path, args: list[str], suite, items, out: Path) -> tuple[Path, float]:
    out.mkdir(parents=True)
    started = time.perf_counter()
    with EngineServer(model_dir, "m", cfg.engine, out / "server.log", args) as server:
        run_suite(server.base_url, "m", suite, items, seed=cfg.seed,
                  sink=out / f"items-{suite.name}.jsonl", timeout_s=cfg.engine.request_timeout_s,
                  concurrency=server.info.device_facts["suite_in_flight"])
    return logprobs_file(out / f"items-{suite.name}.jsonl"), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    parser.add_argument("--candidates", nargs="+",
                        default=["int4", "int8", "fp8", "kv-fp8", "kv-fp8-dynamic", "fp8+kv-fp8"])
    parser.add_argument("--suite", default="heldout-text")
    parser.add_argument("--profile", default="smoke")
    args = parser.parse_args()
    cfg = load_config(args.config)
    suite = load_suite(args.suite)
    items = suite.sample(args.profile, cfg.seed)
    model_dir = cfg.model.resolved_path(cfg.base_dir)
    slices = {it.id: it.slices for it in items}
    with tempfile.TemporaryDirectory(prefix="wb-fid-") as tmp:
        base_file, base_s = score(cfg, model_dir, [], suite, items, Path(tmp) / "baseline")
        print(f"suite {suite.name} ({args.profile}: {len(items)} items), baseline scored in "
              f"{base_s:.0f} s\n")
        print("| candidate | tokens | mean KL | p95 KL | top-1 agreement | "
              "perplexity, baseline → candidate | engine time s |")
        print("|---|---|---|---|---|---|---|")
        digest = folder_digest(model_dir)
        for name in args.candidates:
            q = quantize(cfg, name, cfg.candidate(name), model_dir, digest,
                         Path(tmp) / f"{name}-quantize.log")
            cand_file, cand_s = score(cfg, Path(q.path), q.serve_args, suite, items,
                                      Path(tmp) / name)
            f = compare_fidelity(suite.name, base_file, cand_file, slices)
            print(f"| {name} | {f.tokens} | {f.kl_mean:.4f} | {f.kl_p95:.4f} | "
                  f"{f.top1_agreement:.3f} | {f.baseline_perplexity:.2f} → "
                  f"{f.candidate_perplexity:.2f} | {cand_s:.0f} |", flush=True)


if __name__ == "__main__":
    main()
