"""Does the layer-sensitivity ranking predict what keeping a block buys in a real GPTQ build?

    .venv/bin/python benchmarks/sensitivity_rank.py [--config configs/default.yaml]
        [--candidate int4] [--blocks 11,29,0,3,28,13,26]

For each named block: the candidate's recipe built by llm-compressor (GPTQ, calibrated as
the config says) with only that block kept in 16-bit, and its held-out perplexity ratio
against the baseline as the quantiser measures it after the build (the manifest's
fidelity). What keeping the block buys is the drop from the full recipe's ratio. Prints
each block's sensitivity score (token KL with that block alone rounded, the tune's proxy:
workbench/quantize/sensitivity.py) beside that gain, and Spearman's rank correlation of
the two (scipy). Every build is cached by content, as the tune's trials are: a block the
tune kept alone (its keep-1 trial) is not built again. Results in docs/tune.md.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rich.console import Console
from scipy.stats import spearmanr

from workbench.config.run_config import load_config
from workbench.mechanisms.digests import folder_digest
from workbench.pipeline.quantize import run_quantize
from workbench.quantize.sensitivity import keep_blocks_ignore, measure_sensitivity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--candidate", default="int4")
    parser.add_argument("--blocks", default="11,29,0,3,28,13,26")
    args = parser.parse_args()
    cfg = load_config(Path(args.config))
    cand = cfg.candidates[args.candidate]
    model_dir = cfg.model.resolved_path(cfg.base_dir)
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory() as scratch:
        sens = measure_sensitivity(cfg, args.candidate, cand, model_dir,
                                   folder_digest(model_dir), Path(scratch) / "sensitivity")
        blocks = [int(b) for b in args.blocks.split(",")]
        variants = {f"keep-block-{b}": cand.model_copy(update={"ignore": [
            *cand.ignore, keep_blocks_ignore([b])]}) for b in blocks}
        variants[args.candidate] = cand
        cfg = cfg.model_copy(update={"candidates": variants})
        built = {q.candidate: q for q in run_quantize(cfg, list(variants), Path(scratch),
                                                      console)}
    # the manifest rounds the ratio to 4 places; the perplexities themselves are finer
    ratio = {name: q.manifest["fidelity"]["candidate_perplexity"]
             / q.manifest["fidelity"]["baseline_perplexity"] for name, q in built.items()}
    score = {b.block: b.kl_mean for b in sens.blocks}
    rank = {b: i + 1 for i, b in enumerate(sens.ranked())}
    full = ratio[args.candidate]
    gains = {b: full - ratio[f"keep-block-{b}"] for b in blocks}
    print(f"{args.candidate}: held-out perplexity ratio {full:.4f} with every block "
          "quantised\n")
    print("| block | sensitivity rank | KL, that block alone rounded | perplexity ratio kept "
          "in 16-bit | gain |")
    print("|---|---|---|---|---|")
    for b in sorted(blocks, key=lambda b: rank[b]):
        print(f"| {b} | {rank[b]} | {score[b]:.4f} | {ratio[f'keep-block-{b}']:.4f} | "
              f"{gains[b]:+.4f} |")
    rho, p = spearmanr([score[b] for b in blocks], [gains[b] for b in blocks])
    print(f"\nSpearman rank correlation of sensitivity and gain over {len(blocks)} blocks: "
          f"{rho:.2f} (p = {p:.3f})")


if __name__ == "__main__":
    main()
