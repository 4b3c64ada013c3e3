"""Does the evaluator keep the engine busy? Output-token rate during a quality suite
against the rate under a pure load test, on the same server, in one run.

    .venv/bin/python benchmarks/eval_throughput.py [--suite arithmetic] [--concurrency 8]

1. Serve the baseline of the config.
2. Run the suite (full profile) through the workbench's evaluator at the given
   concurrency; the engine's own counter `vllm:generation_tokens_total` (from /metrics)
   over the suite's wall time is its output-token rate while being evaluated.
3. Run `vllm bench serve` at the same concurrency with the suite's mean prompt and output
   lengths; its reported output throughput (timed by the benchmark itself, start-up
   excluded) is the rate the engine reaches when nothing but load drives it.

Prints both and their ratio; the target is at least 0.6.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workbench.config.run_config import LoadProfile, load_config  # noqa: E402
from workbench.loadtest.bench import level_requests, run_load_test  # noqa: E402
from workbench.serve.engine import EngineServer  # noqa: E402
from workbench.suites.definition import load_suite  # noqa: E402
from workbench.suites.runner import run_suite  # noqa: E402

_COUNTER = re.compile(r"^vllm:(generation|prompt)_tokens_total\{[^}]*\} ([0-9.e+]+)$", re.M)


def token_counters(server: EngineServer) -> dict[str, float]:
    totals: dict[str, float] = {"generation": 0.0, "prompt": 0.0}
    for kind, value in _COUNTER.findall(server.metrics()):
        totals[kind] += float(value)
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    parser.add_argument("--suite", default="arithmetic")
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    cfg = load_config(args.config)
    suite = load_suite(args.suite)
    items = suite.sample("full", cfg.seed)
    model_dir = cfg.model.resolved_path(cfg.base_dir)
    with tempfile.TemporaryDirectory(prefix="wb-evtp-") as tmp, \
            EngineServer(model_dir, "m", cfg.engine, Path(tmp) / "server.log") as server:
        before = token_counters(server)
        started = time.perf_counter()
        result = run_suite(server.base_url, "m", suite, items, seed=cfg.seed,
                           sink=Path(tmp) / "items.jsonl", concurrency=args.concurrency)
        suite_s = time.perf_counter() - started
        after = token_counters(server)
        generated = after["generation"] - before["generation"]
        prompt_len = round((after["prompt"] - before["prompt"]) / len(items))
        output_len = max(1, round(generated / len(items)))
        eval_rate = generated / suite_s
        profile = LoadProfile(concurrency=[args.concurrency], num_prompts=len(items),
                              prompt_tokens=prompt_len, output_tokens=output_len,
                              warmup_prompts=4)
        load = run_load_test(server.base_url, "m", model_dir, profile, Path(tmp) / "load",
                             level_requests(profile, None, cfg.engine.max_model_len),
                             ceiling=False)
        load_rate = load.levels[0].output_throughput
    print(f"model {model_dir.name}, device {server.device}, concurrency {args.concurrency}")
    print(f"suite {suite.name}: {len(items)} items in {suite_s:.1f} s, {generated:.0f} tokens "
          f"generated (mean prompt {prompt_len}, output {output_len}); accuracy "
          f"{result.accuracy:.3f}")
    print(f"engine output rate while evaluating: {eval_rate:8.1f} tok/s (engine counter / wall)")
    print(f"engine output rate under pure load:  {load_rate:8.1f} tok/s (vllm bench serve, "
          f"{profile.num_prompts} requests of {prompt_len} -> {output_len} tokens)")
    print(f"ratio: {eval_rate / load_rate:.2f} (target >= 0.6)")


if __name__ == "__main__":
    main()
