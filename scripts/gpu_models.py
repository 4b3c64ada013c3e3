"""The models and texts of the GPU check's quantise part (scripts/gpu_quantize.py):
Llama-3.1 8B and 70B shapes with few layers and seeded random weights, and the
calibration and held-out passages from calibration_data/.

The widths are the real ones (hidden 4096 / 8192, MLP 14336 / 28672, 32 / 64 heads of
128, 8 KV heads), so the quantiser's per-layer time and memory are those of the real
layers; only the layer count is cut (4 and 2). The vocabulary is SmolLM2's (49,152
tokens, its tokenizer carried in .gpu/model-shape) instead of Llama's 128,256: the
embedding and lm_head then stay small (0.4 / 0.8 GB in bf16), and the tokenizer fits
what the machine is sent. The dry run divides every width by `scale` (16), keeping the
head size, so that it finishes on two CPU cores.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

__all__ = ["CASES", "SHAPES", "build_random_model", "calibration_texts", "heldout_texts",
           "llama_config", "shape_dims"]

HEAD_DIM = 128
SHAPES: dict[str, dict[str, int]] = {
    # Llama-3.1-8B: 32 layers in the real model; 4 here
    "llama-8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "num_hidden_layers": 4, "real_layers": 32},
    # Llama-3.1-70B: 80 layers in the real model; 2 here
    "llama-70b": {"hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
                  "num_key_value_heads": 8, "num_hidden_layers": 2, "real_layers": 80},
}
# (case, shape, recipe, group size): the quantize worker's recipe names
CASES: list[tuple[str, str, str, int | None]] = [
    ("8b-w4a16-g128", "llama-8b", "w4a16", 128),
    ("8b-w8a8-int8", "llama-8b", "w8a8-int8", None),
    ("8b-fp8-dynamic", "llama-8b", "fp8-dynamic", None),
    ("8b-kv-fp8", "llama-8b", "kv-fp8", None),
    ("70b-w4a16-g128", "llama-70b", "w4a16", 128),
]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "chat_template.jinja", "generation_config.json")


def shape_dims(shape: str, scale: int) -> dict[str, int]:
    """The shape's widths divided by scale, heads kept at 128 wide (at least one)."""
    real = SHAPES[shape]
    heads = max(1, real["num_attention_heads"] // scale)
    dims = {"hidden_size": heads * HEAD_DIM, "num_attention_heads": heads,
            "num_key_value_heads": max(1, real["num_key_value_heads"] // scale),
            "intermediate_size": real["intermediate_size"] // scale,
            "num_hidden_layers": real["num_hidden_layers"]}
    if dims["intermediate_size"] % HEAD_DIM or heads % dims["num_key_value_heads"]:
        raise ValueError(f"scale {scale}: {shape} has no whole groups of 128 or heads per "
                         "KV head (use 1, 2, 4, 8 or 16)")
    return dims


def llama_config(shape: str, scale: int, tokenizer_dir: Path) -> dict[str, Any]:
    """A Llama config.json for the shape, with the carried tokenizer's vocabulary."""
    tok = json.loads((tokenizer_dir / "config.json").read_text())
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            **shape_dims(shape, scale), "head_dim": HEAD_DIM,
            "vocab_size": tok["vocab_size"], "bos_token_id": tok.get("bos_token_id"),
            "eos_token_id": tok.get("eos_token_id"), "pad_token_id": tok.get("pad_token_id"),
            "hidden_act": "silu", "rms_norm_eps": 1e-5, "max_position_embeddings": 8192,
            "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
            "tie_word_embeddings": False, "attention_bias": False,
            "mlp_bias": False, "initializer_range": 0.02, "torch_dtype": "bfloat16"}


def build_random_model(config: dict[str, Any], tokenizer_dir: Path, out: Path,
                       device: str) -> Any:
    """The model with seeded random weights, initialised on device (fast on a GPU), saved
    in bf16 with the tokenizer; returned loaded, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(LlamaConfig(**config), dtype=torch.bfloat16)
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copyfile(tokenizer_dir / name, out / name)
    return model.eval()


def _texts(name: str) -> list[str]:
    lines = (REPO / "calibration_data" / name).read_text().splitlines()
    return [json.loads(line)["text"] for line in lines if line.strip()]


def calibration_texts(n: int, seed: int = 0) -> list[str]:
    """A seeded sample of the default config's calibration files (configs/gpu.yaml)."""
    texts = [t for f in ("shakespeare_milton.jsonl", "python_stdlib.jsonl",
                         "multilingual.jsonl", "code_polyglot.jsonl") for t in _texts(f)]
    return random.Random(seed).sample(texts, n)


def heldout_texts(n: int, seed: int = 0) -> list[str]:
    return random.Random(seed).sample(_texts("heldout.jsonl"), n)
