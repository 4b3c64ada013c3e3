"""A capacity plan for a large model on a GPU host, from the workbench's own formulas:
weights per format, KV capacity and whole sequences that fit (headroom.headroom, the same
code that reads an engine's vllm:cache_config_info), cost per million output tokens for
every device an engine holds (loadtest.cost_figures, as the record computes it), and a
fanned-out sweep's wall time (sweep.generated_tokens over the config's suites and load).

    .venv/bin/python benchmarks/capacity_plan.py                # Llama-3-70B on 8 x 80 GB
    .venv/bin/python benchmarks/capacity_plan.py --decode-tok-s 1500 --gpus 8 --tp 4

Model shape: Meta-Llama-3-70B's config.json on the Hugging Face hub (hidden 8192, 80
layers, 64 heads, 8 KV heads, intermediate 28672, vocabulary 128256, untied embeddings).
Inputs the workbench cannot know before measuring (the engine's decode rate, vLLM's
non-KV overhead per GPU, the quantiser's time) are arguments, printed with the plan;
replace them with your own run's figures (the sweep table's throughput, the quantise
manifest's wall_time_s) to tighten it.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workbench.config.run_config import DEFAULT_PRICE_PER_HOUR, load_config  # noqa: E402
from workbench.loadtest.headroom import PeakSampler, headroom  # noqa: E402
from workbench.loadtest.results import LevelResult, cost_figures
from workbench.plan.plan import Outputs, plan  # noqa: E402
from workbench.sweep.run import generated_tokens  # noqa: E402

GiB = 2**30


@dataclass(frozen=True)
class Shape:
    hidden: int = 8192
    layers: int = 80
    heads: int = 64
    kv_heads: int = 8
    intermediate: int = 28672
    vocab: int = 128256

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def linear_params(self) -> int:
        """Parameters in the decoder's linear layers: what a recipe quantises."""
        kv = self.kv_heads * self.head_dim
        attention = self.hidden * (self.hidden + 2 * kv) + self.hidden * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (attention + mlp)

    def other_params(self) -> int:
        """Embeddings and lm_head (kept in bf16: every recipe ignores lm_head) and norms."""
        return 2 * self.vocab * self.hidden + (2 * self.layers + 1) * self.hidden

    def kv_bytes_per_token(self, kv_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * kv_bytes


# bits per quantised weight, scales included: w4a16 with groups of 128 keeps a bf16 scale
# per group; int8 and FP8 keep one per output channel (negligible at this size)
FORMATS = {"bf16 (baseline)": (16.0, 2), "int4 (w4a16, g128)": (4 + 16 / 128, 2),
           "int8 (w8a8)": (8.0, 2), "fp8 weights": (8.0, 2), "fp8 KV cache": (16.0, 1)}


def weights_bytes(shape: Shape, bits: float) -> float:
    return shape.linear_params() * bits / 8 + shape.other_params() * 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--gpu-gib", type=float, default=80e9 / GiB, help="memory per GPU (GiB)")
    ap.add_argument("--tp", type=int, default=4, help="engine.tensor_parallel_size")
    ap.add_argument("--utilization", type=float, default=0.85,
                    help="engine.gpu_memory_utilization (the workbench's default)")
    ap.add_argument("--overhead-gib", type=float, default=4.0,
                    help="vLLM's activations and CUDA graphs per GPU (assumed; the engine "
                         "log's profile reports it)")
    ap.add_argument("--sequence", type=int, default=2048 + 512,
                    help="prompt + output tokens of the workload's longest request")
    ap.add_argument("--decode-tok-s", type=float, default=1000.0,
                    help="output tokens/s one engine sustains on the suites and load (assumed)")
    ap.add_argument("--quantise-h", type=float, default=2.0,
                    help="hours to build one quantised candidate (assumed; GPTQ over 70B)")
    ap.add_argument("--cold-start-min", type=float, default=5.0,
                    help="minutes from engine start to first token for a 70B (assumed; the "
                         "record's engine.cold_start gives yours)")
    ap.add_argument("--candidates", type=int, default=4)
    ap.add_argument("--profile", choices=("smoke", "full"), default="full")
    ap.add_argument("--config", default="configs/default.yaml",
                    help="the suites and load profile whose tokens the sweep generates")
    args = ap.parse_args()
    shape = Shape()

    print(f"## {args.gpus} x {args.gpu_gib:.1f} GiB GPUs, engines of tensor_parallel_size "
          f"{args.tp}, gpu_memory_utilization {args.utilization}, {args.overhead_gib:g} GiB "
          f"overhead per GPU, sequences of {args.sequence} tokens\n")
    print("| format | weights (GiB) | per GPU (GiB) | KV cache (GiB) | KV tokens | "
          "sequences that fit | fits? |")
    print("|---|---|---|---|---|---|---|")
    for name, (bits, kv_bytes) in FORMATS.items():
        w = weights_bytes(shape, bits)
        per_gpu = w / args.tp
        free = args.gpu_gib * GiB * args.utilization - per_gpu - args.overhead_gib * GiB
        per_token = shape.kv_bytes_per_token(kv_bytes)
        tokens = max(0, int(free * args.tp // per_token))
        block = 16
        room = headroom(None, {"kv_cache_size_tokens": str(tokens),
                               "num_gpu_blocks": str(tokens // block), "block_size": str(block),
                               "cache_dtype": "fp8" if kv_bytes == 1 else "auto"},
                        args.sequence, PeakSampler(None, lambda: 0.0), 0, devices=args.tp)
        print(f"| {name} | {w / GiB:.1f} | {per_gpu / GiB:.1f} | "
              f"{max(free, 0) * args.tp / GiB:.1f} | {tokens:,} | "
              f"{room.max_concurrent_sequences} | {'yes' if free > 0 else 'no'} |")

    per_device = DEFAULT_PRICE_PER_HOUR["cuda"]
    level = LevelResult(concurrency=None, completed=0, failed=0, duration_s=0.0,
                        request_throughput=1.0, output_throughput=args.decode_tok_s,
                        ttft_ms={}, tpot_ms={}, itl_ms={}, e2el_ms={}, raw_file="",
                        label="assumed")
    cost = cost_figures(level, per_device * args.tp)
    print(f"\nCost at {args.decode_tok_s:g} output tok/s per engine, {args.tp} GPUs at "
          f"${per_device:.2f}/GPU-hour (the workbench's illustrative default): "
          f"${cost['usd_per_million_output_tokens']:.2f} per million output tokens.")

    cfg = load_config(Path(args.config)).model_copy(update={"profile": args.profile})
    p = plan(cfg, next(iter(cfg.candidates)), Outputs(), "cpu")
    tokens = generated_tokens(p)
    slots = args.gpus // args.tp
    # one engine session per model and load round, each paying a cold start
    per_model_h = (tokens / args.decode_tok_s + 60 * args.cold_start_min * cfg.load.rounds
                   ) / 3600
    # the baseline's suites once, then per candidate: its baseline's load beside it and its
    # own suites and load, in `slots` candidates at a time
    waves = math.ceil(args.candidates / slots)
    wall = per_model_h + args.quantise_h * waves + waves * 2 * per_model_h
    serial = per_model_h + args.candidates * (args.quantise_h + 2 * per_model_h)
    print(f"\nSweep of {args.candidates} candidates with {args.config} ({cfg.profile} "
          f"profile, load profile {cfg.load.profile!r}, {cfg.load.rounds} load rounds): "
          f"{tokens:,} output tokens per model evaluation, {per_model_h * 60:.0f} min with "
          f"{args.cold_start_min:g} min per cold start at {args.decode_tok_s:g} tok/s. "
          f"{slots} engines of {args.tp} GPUs at once: about {wall:.1f} h "
          f"(serially {serial:.1f} h), of which quantising {args.quantise_h:g} h per wave.")


if __name__ == "__main__":
    main()
