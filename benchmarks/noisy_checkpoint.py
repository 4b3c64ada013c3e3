"""A deliberately broken candidate: the default model with Gaussian noise on its weights.

    .venv/bin/python benchmarks/noisy_checkpoint.py OUT_DIR [--scale 0.5] [--seed 0]

Every floating-point tensor of the model (embeddings and norms included) gets noise of
`scale` times its own standard deviation; the tokenizer files and configs are copied as they
are, so the checkpoint passes the comparability check and only its weights differ. Used as
`candidates.<name>.checkpoint` to check that quality gates, not only fidelity and health,
reject a checkpoint whose answers carry no information (docs/gates.md).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workbench.mechanisms.paths import default_model_dir  # noqa: E402


def main() -> None:
    import torch
    from safetensors.torch import load_file, save_file

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--scale", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    shutil.copytree(default_model_dir(), args.out)
    weights = load_file(args.out / "model.safetensors")
    generator = torch.Generator().manual_seed(args.seed)
    noisy = {}
    for name, tensor in weights.items():
        values = tensor.float()
        spread = values.std() if values.numel() > 1 else values.abs()
        noise = torch.randn(values.shape, generator=generator) * spread * args.scale
        noisy[name] = (values + noise).to(tensor.dtype)
    save_file(noisy, args.out / "model.safetensors", metadata={"format": "pt"})
    print(f"wrote {args.out}: {len(noisy)} tensors, noise {args.scale} x each tensor's std")


if __name__ == "__main__":
    main()
