"""The `kernels` part of the GPU check (scripts/gpu_check.sh): the kernel vLLM is expected
to pick for each layer of each quantised case, at each tensor-parallel size, from the
workbench's own rule (workbench/quantize/kernels.py, `expected_kernels`).

    python scripts/gpu_kernels.py OUT MODE

Asked of the real widths (the 8B and 70B shapes, not the dry run's scaled ones), at this
GPU's compute capability; the dry run asks at 9.0, the H200's, and says so. A
tensor-parallel size that does not divide the KV heads is not asked. The rule covers
vLLM's weight-only (mixed-precision) kernels: a W4A16 case is asked as compressed-tensors'
symmetric 4-bit ("uint4b8"); W8A8 int8, FP8 W8A8 and an FP8 KV cache take vLLM's
scaled-mm and attention paths, which it does not cover, and are listed as such. Without
the module (or an import it lacks) the part is skipped as "not available".
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from gpu_models import CASES, SHAPES, shape_dims  # noqa: E402
from gpu_summary import check, part_record, write_part  # noqa: E402

__all__ = ["H200_CAPABILITY", "TP_SIZES", "real_config"]

H200_CAPABILITY = (9, 0)
TP_SIZES = (1, 2, 4, 8)
CHANNELWISE = -1  # no groups: vLLM's and llm-compressor's convention for a whole row
# the quantize worker's recipe -> vLLM's weight type (kernels.py SCHEMES): symmetric int
WEIGHT_ONLY = {"w4a16": "uint4b8", "w8a16": "uint8b128"}


def real_config(shape: str) -> dict[str, Any]:
    """The shape's config.json fields that decide kernels, at the real widths."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "head_dim": 128,
            "vocab_size": 49152, "torch_dtype": "bfloat16", **shape_dims(shape, 1)}


def capability(mode: str) -> tuple[tuple[int, int], str]:
    import torch

    if mode == "gpu" and torch.cuda.is_available():
        cap = torch.cuda.get_device_capability(0)
        return (int(cap[0]), int(cap[1])), torch.cuda.get_device_name(0)
    return H200_CAPABILITY, "dry run: the H200's capability 9.0 assumed"


def ask(expected_kernels: Any, cap: tuple[int, int]) -> tuple[dict, list[dict]]:
    figures: dict[str, Any] = {}
    checks = []
    for case, shape, recipe, group in CASES:
        if recipe not in WEIGHT_ONLY:
            figures[case] = f"{recipe}: not a weight-only kernel (scaled-mm or attention path)"
            continue
        config = real_config(shape)
        for tp in TP_SIZES:
            if SHAPES[shape]["num_key_value_heads"] % tp:
                continue
            try:
                kernels = expected_kernels(config, WEIGHT_ONLY[recipe], group or CHANNELWISE,
                                           cap, tp)
            except Exception as err:  # noqa: BLE001 - a refusal is a figure too
                kernels = {"error": f"{type(err).__name__}: {err}"}
            figures[f"{case} tp{tp}"] = kernels
        one = figures[f"{case} tp1"]
        checks.append(check(f"{case}: a kernel per layer at tp 1",
                            bool(one) and "error" not in one
                            and all(isinstance(v, str) for v in one.values()), one))
    return figures, checks


def main(out: Path, mode: str) -> int:
    started = time.perf_counter()
    sys.path.insert(0, str(REPO))
    try:
        from workbench.quantize.kernels import expected_kernels
    except Exception as err:  # noqa: BLE001 - ImportError, or an import of its own missing
        write_part(out, part_record("kernels", "skipped", time.perf_counter() - started,
                                    reason=f"not available ({type(err).__name__}: {err})"))
        return 0
    cap, where = capability(mode)
    figures, checks = ask(expected_kernels, cap)
    record = part_record("kernels", None, time.perf_counter() - started, checks=checks,
                         figures={"capability": f"{cap[0]}.{cap[1]} ({where})", **figures})
    write_part(out, record)
    return 0 if record["status"] == "ran" else 1


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in ("gpu", "dry-run"):
        print("usage: gpu_kernels.py OUT gpu|dry-run", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1]), sys.argv[2]))
