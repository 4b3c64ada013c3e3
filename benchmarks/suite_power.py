"""Can each quality suite see a change on this model? Accuracy with its interval against
the suite's chance level, and whether the model gives one answer to every item.

    .venv/bin/python benchmarks/suite_power.py [--config configs/default.yaml]
        [--suite mmlu-sample --suite boolq ...] [--items 200]

Serves the config's baseline once and runs each suite (the config's quality suites by
default) on the items the config's profile runs, or on the first --items of the full
profile's seeded sample. Prints a
Markdown table: items, accuracy with its exact (Clopper-Pearson) interval at 95%, the
chance level (a uniform guess: the mean of 1/options; a generated suite: 0), the best any
constant answer scores, distinct answers, and whether the lower bound clears both
(docs/gates.md, "Suites that can see a change").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workbench.config.run_config import load_config  # noqa: E402
from workbench.gate.floors import rate_interval  # noqa: E402
from workbench.serve.engine import EngineServer  # noqa: E402
from workbench.suites.definition import Suite, SuiteItem, load_suite  # noqa: E402
from workbench.suites.results import ItemResult  # noqa: E402
from workbench.suites.runner import run_suite  # noqa: E402


def chance_level(items: tuple[SuiteItem, ...]) -> float:
    return sum(1 / len(i.choices) for i in items) / len(items) if items[0].choices else 0.0


def best_constant(items: tuple[SuiteItem, ...]) -> float:
    """What always giving the most common right answer scores (boolq's "yes": 0.62)."""
    if not items[0].choices:
        return 0.0
    return Counter(i.answer for i in items).most_common(1)[0][1] / len(items)


def _answer(item: ItemResult) -> str:
    """The option picked (its index), or the generated text."""
    if item.choice_probs:
        return str(max(range(len(item.choice_probs)), key=item.choice_probs.__getitem__))
    return item.response


def measure(server: EngineServer, suite: Suite, items: tuple[SuiteItem, ...], tmp: Path,
            seed: int, model_dir: Path) -> dict:
    started = time.perf_counter()
    result = run_suite(server.base_url, "m", suite, items, seed=seed,
                       sink=tmp / f"items-{suite.name}.jsonl", concurrency=8,
                       tokenizer_dir=model_dir)
    right = sum(int(i.score) for i in result.items)
    low, high = rate_interval(right, result.n, 0.95)
    return {"suite": suite.name, "n": result.n, "accuracy": right / result.n, "low": low,
            "high": high, "chance": chance_level(items), "constant": best_constant(items),
            "answers": len({_answer(i) for i in result.items}),
            "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    parser.add_argument("--suite", action="append", default=[])
    parser.add_argument("--items", type=int, default=None)
    args = parser.parse_args()
    cfg = load_config(args.config)
    suites = [load_suite(n) for n in (args.suite or cfg.suites)]
    suites = [s for s in suites if s.spec.kind == "quality"]
    model_dir = cfg.model.resolved_path(cfg.base_dir)
    rows = []
    with tempfile.TemporaryDirectory(prefix="wb-power-") as tmp, \
            EngineServer(model_dir, "m", cfg.engine, Path(tmp) / "server.log") as server:
        for suite in suites:
            items = suite.sample("full" if args.items else cfg.profile, cfg.seed)[:args.items]
            rows.append(measure(server, suite, items, Path(tmp), cfg.seed, model_dir))
            r = rows[-1]
            print(f"{r['suite']}: {r['accuracy']:.3f} [{r['low']:.3f}, {r['high']:.3f}] "
                  f"n={r['n']} in {r['seconds']:.0f} s", flush=True)
    print("\n| suite | items | accuracy [95% exact] | chance | best constant | answers | "
          "sees a change | s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        sees = r["low"] > max(r["chance"], r["constant"]) and r["answers"] > 1
        print(f"| {r['suite']} | {r['n']} | {r['accuracy']:.3f} [{r['low']:.3f}, "
              f"{r['high']:.3f}] | {r['chance']:.3f} | {r['constant']:.3f} | {r['answers']} | "
              f"{'yes' if sees else 'no'} | {r['seconds']:.0f} |")


if __name__ == "__main__":
    main()
