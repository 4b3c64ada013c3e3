"""Tensor parallel 2 on a host where two GPUs answer, without vLLM: the model sharded over
both GPUs by transformers' own tensor-parallel plan (tp_plan "auto", under torchrun), its
logits on held-out passages compared with the same model on one GPU (the workbench's
fidelity figures: KL, top-1 agreement, perplexity), and the time of each.

    torchrun --nproc-per-node 2 scripts/gpu_tp_check.py --out DIR [--model DIR]

Run by scripts/gpu_check.sh (part `tp2`, where two GPUs answer). Without --model, the
default model's shapes with seeded random weights, its heads made divisible by two
(random_divisible_model). A sharded model that computes the same function gives KL ~0
and top-1 agreement ~1 (bf16 reductions in another order move the last digits, and a
random model's near-flat distributions turn those into a few top-1 flips).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from gpu_fidelity import fidelity, passage_logprobs  # noqa: E402


def log(text: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"[gpu_tp_check] {text}", flush=True)


def passages(n: int) -> list[str]:
    rows = (REPO / "calibration_data" / "heldout.jsonl").read_text().splitlines()[:n]
    return [json.loads(r)["text"] for r in rows]


def random_divisible_model(shape_dir: Path, out: Path, world: int) -> Path:
    """The default model's shapes with seeded random weights, its attention heads made
    divisible by the world size: SmolLM2-135M's 9 heads and 3 KV heads cannot be split
    over 2 GPUs (vLLM refuses that too), so 8 heads and 4 KV heads of 64 take their place
    (hidden 512); the rest (layers, MLP width, vocabulary) stays."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(shape_dir)
    if config.num_attention_heads % world or config.num_key_value_heads % world:
        config.num_attention_heads, config.num_key_value_heads = 8, 4
        config.head_dim, config.hidden_size = 64, 512
    AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(out)
    AutoTokenizer.from_pretrained(shape_dir).save_pretrained(out)
    return out


def sharded(model_dir: Path) -> Any:
    """The model split over every rank's GPU by transformers' tensor-parallel plan."""
    import torch
    from transformers import AutoModelForCausalLM

    try:  # transformers >= 5.x names the plan in a DistributedConfig
        from transformers import DistributedConfig

        return AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.bfloat16,
            distributed_config=DistributedConfig(tp_plan="auto"))
    except (ImportError, TypeError):
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16,
                                                    tp_plan="auto")


def main() -> int:
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, AutoTokenizer

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default=None)
    parser.add_argument("--passages", type=int, default=16)
    args = parser.parse_args()
    out = Path(args.out)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    model_dir = Path(args.model) if args.model else out / "tp-model"
    if args.model is None and rank == 0 and not (model_dir / "config.json").exists():
        random_divisible_model(REPO / ".gpu" / "model-shape", model_dir, world)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if world > 1:
        dist.barrier()  # rank 0 wrote the model
    tok = AutoTokenizer.from_pretrained(model_dir)
    texts = passages(args.passages)

    started = time.perf_counter()
    model = sharded(model_dir)
    device = str(model.device)
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    tp = [(lp.cpu(), t.cpu()) for lp, t in passage_logprobs(model, tok, texts, device, 256)]
    tp_s = time.perf_counter() - started
    log(f"tensor parallel {world}: loaded in {load_s:.1f}s, {len(texts)} passages in "
        f"{tp_s:.2f}s on {device}")
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if rank == 0:
        one_device = "cuda:0" if torch.cuda.is_available() else "cpu"
        single: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
        single = single.to(one_device).eval()
        started = time.perf_counter()
        ref = [(lp.cpu(), t.cpu())
               for lp, t in passage_logprobs(single, tok, texts, one_device, 256)]
        one_s = time.perf_counter() - started
        figures = {"world_size": world, "gpus": torch.cuda.device_count(),
                   "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "",
                   "torch": torch.__version__,
                   "transformers": __import__("transformers").__version__,
                   "weights": "given" if args.model else "random (the default model's "
                   "shapes, 8 heads and 4 KV heads)",
                   "load_sharded_s": round(load_s, 2), "forward_sharded_s": round(tp_s, 3),
                   "forward_one_device_s": round(one_s, 3),
                   "fidelity_sharded_vs_one_device": fidelity(ref, tp)}
        (out / "tp2.json").write_text(json.dumps(figures, indent=2))
        log(json.dumps(figures))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
