"""What an int4 checkpoint really runs as on vLLM's AMD Zen platform (issue 55, step 3's
format rule; the record's runs_as where the engine served there: quantize/formats.py).

On an AMD CPU with AVX-512 where zentorch imports, vLLM 0.32.0 serves on ZenCpuPlatform
(vllm/platforms/__init__.py, `_is_amd_zen_cpu`), and a compressed-tensors int4 layer goes
to `ZentorchWNA16LinearKernel` (model_executor/kernels/linear/mixed_precision/zentorch.py),
unless its `can_implement` refuses the layer (a group size that does not divide the input
width), in which case vLLM's generic CPUWNA16 kernel is chosen (it runs W4A16 on Zen: its
own W4A8 branch needs AMX, which no AMD CPU has). ZentorchWNA16 picks one of three paths per
layer when its weights are loaded:
1. **DA8W4**, `zentorch_dynamic_qlinear`: the activations quantised to int8 per token at
   run time, so the layer computes W4A8, not the W4A16 its recipe names. Taken when
   `VLLM_CPU_INT4_W4A8` is on (vLLM's default), the weights are symmetric (no zero points,
   not `uint4`), the activations are bfloat16, the weights are packed along the input
   dimension (compressed-tensors' layout), and each group's width is a multiple of 4 with
   an even input width;
2. **W4A16**, `zentorch_woq_linear`, where DA8W4 is not taken but the layout is
   compressed-tensors' and the groups divide the input width;
3. vLLM's generic **CPUWNA16** kernel (`cpu_gemm_wna16`, W4A16) otherwise.
tests/unit/test_zen_rules.py drives vLLM's own kernel code over these cases and holds this
rule to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ZenInt4", "ZenPath", "zen_int4_path", "zen_runs_as"]

Kernel = Literal["zentorch_dynamic_qlinear", "zentorch_woq_linear", "cpu_gemm_wna16"]


@dataclass(frozen=True)
class ZenPath:
    kernel: Kernel
    activations: Literal["int8, quantised per token at run time", "16-bit"]

    @property
    def label(self) -> str:
        """The format as it runs: what a record states beside the recipe's name."""
        if self.kernel == "zentorch_dynamic_qlinear":
            return "W4A8 (dynamic int8 activations; zentorch DA8W4)"
        return f"W4A16 ({self.kernel})"


def zen_int4_path(symmetric: bool, serve_dtype: str, in_features: int, group_size: int,
                  w4a8: bool = True, packed_along_input: bool = True) -> ZenPath:
    """The path vLLM 0.32.0's ZentorchWNA16LinearKernel takes for one int4 layer.

    serve_dtype is the resolved one, bfloat16 or float32 (ZenCpuPlatform serves no float16).
    group_size -1 is one group per output row (per channel); w4a8 is the engine's
    `VLLM_CPU_INT4_W4A8`; packed_along_input is False for a layout other than
    compressed-tensors' (packed along the input dimension, `input_dim == packed_dim == 1`:
    what the workbench builds, GPTQ, AWQ and round-to-nearest alike), e.g. AutoAWQ's."""
    if group_size != -1 and (group_size <= 0 or in_features % group_size):
        return ZenPath("cpu_gemm_wna16", "16-bit")  # can_implement refuses: CPUWNA16 is next
    groups = 1 if group_size == -1 else in_features // group_size
    woq = packed_along_input and in_features % groups == 0
    if not woq:
        return ZenPath("cpu_gemm_wna16", "16-bit")
    da8w4 = (w4a8 and symmetric and serve_dtype == "bfloat16"
             and (in_features // groups) % 4 == 0)
    if da8w4:
        return ZenPath("zentorch_dynamic_qlinear", "int8, quantised per token at run time")
    return ZenPath("zentorch_woq_linear", "16-bit")


@dataclass(frozen=True)
class ZenInt4:
    """The candidate's int4 grid, as zen_int4_path reads it for every layer."""

    symmetric: bool
    group_size: int
    in_features: tuple[int, ...]  # each decoder linear layer's input width


def zen_runs_as(grid: ZenInt4, serve_dtype: str) -> str | None:
    """The record's statement of what int4 ran as on ZenCpuPlatform: None where every
    layer runs W4A16 as the recipe names; else the paths the layers take."""
    labels = sorted({zen_int4_path(grid.symmetric, serve_dtype, width, grid.group_size).label
                     for width in grid.in_features})
    if all(label.startswith("W4A16") for label in labels):
        return None
    return (f"{' and '.join(labels)}, not W4A16: on vLLM's AMD Zen platform (zentorch) a "
            "symmetric int4 layer served in bf16 quantises its activations to int8 per token")
