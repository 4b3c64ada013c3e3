"""Which of vLLM's weight-only kernels should run each linear layer of a dense decoder on a
CUDA GPU, worked out from the model's config.json without vLLM (the GPU check runs this on
a machine that has no vLLM).

vLLM picks the kernel per layer, from the layer's shape on this tensor-parallel rank, and
logs each kernel it uses only once per process without naming the layer, so its log shows
which kernels ran but not where. This table says where. It mirrors vLLM 0.32.0:
``choose_mp_linear_kernel`` and ``_POSSIBLE_KERNELS[CUDA]`` in
vllm/model_executor/kernels/linear/__init__.py, each kernel's ``get_min_capability`` and
``can_implement`` in vllm/model_executor/kernels/linear/mixed_precision/, the Humming
reordering in vllm/model_executor/layers/quantization/utils/humming/priority.py, and for
FP8 weights ``init_wfp8_a16_linear_kernel`` with ``_POSSIBLE_WFP8A16_KERNELS[CUDA]``.
tests/unit/test_engine_log_cuda.py holds it to vLLM's own chooser, layer by layer.
Assumed as vLLM runs by default: no ``--linear-backend``, no ``VLLM_DISABLED_KERNELS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SCHEMES", "VLLM_CUDA_EXTRAS", "LayerShape", "expected_kernels", "layer_shapes"]

# The optional kernel packages a CUDA install of vllm 0.32.0 brings: its wheel requires
# humming-kernels[cu13]==0.1.17 (module `humming`); conch-triton-kernels is not required.
VLLM_CUDA_EXTRAS = frozenset({"humming"})


@dataclass(frozen=True)
class _Scheme:
    weight_type: str   # vLLM's ScalarType name (vllm/scalar_type.py)
    zero_points: bool
    bits: int


# compressed-tensors' weight schemes as vLLM types them (compressed_tensors_wNa16.py:
# symmetric N-bit -> uintNb(2^(N-1)), asymmetric -> uintN with zero points); "fp8" is FP8
# weights with 16-bit activations (CompressedTensorsW8A16Fp8), which takes another path.
SCHEMES = {
    "uint4b8": _Scheme("uint4b8", False, 4),      # W4A16, GPTQ-style symmetric
    "uint4": _Scheme("uint4", True, 4),           # W4A16 asymmetric, with zero points
    "uint8b128": _Scheme("uint8b128", False, 8),  # W8A16 int8, symmetric
    "uint8": _Scheme("uint8", True, 8),           # W8A16 int8 asymmetric
    "fp8": _Scheme("float8_e4m3fn", False, 8),    # W8A16 FP8
}


@dataclass(frozen=True)
class LayerShape:
    """(in, out) of one fused linear layer: whole, and on one tensor-parallel rank."""

    full: tuple[int, int]
    partition: tuple[int, int]


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    return config.get("text_config") or config


def _need(text: dict[str, Any], key: str) -> int:
    value = text.get(key)
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"config.json: {key} is {value!r}; a dense decoder needs a positive "
                         "integer there")
    return value


def _split(total: int, tp: int, what: str) -> int:
    if total % tp:
        raise ValueError(f"tensor-parallel size {tp} does not divide {what} ({total}); "
                         "vLLM refuses it (vllm/distributed/utils.py divide)")
    return total // tp


def layer_shapes(config: dict[str, Any], tp: int = 1) -> dict[str, LayerShape]:
    """The four fused linear layers of a decoder block as vLLM builds them
    (vllm/model_executor/layers/linear.py): qkv_proj and gate_up_proj split their output
    across ranks, o_proj and down_proj their input; below one key-value head per rank the
    key-value heads are replicated (QKVParallelLinear)."""
    if tp < 1:
        raise ValueError(f"tensor-parallel size {tp}: it must be 1 or more")
    text = _text_config(config)
    hidden, heads = _need(text, "hidden_size"), _need(text, "num_attention_heads")
    inter = _need(text, "intermediate_size")
    kv = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or hidden // heads
    heads_here = _split(heads, tp, "num_attention_heads")
    kv_here = 1 if tp >= kv else _split(kv, tp, "num_key_value_heads")
    if tp >= kv and tp % kv:
        raise ValueError(f"tensor-parallel size {tp} is not a multiple of "
                         f"num_key_value_heads ({kv}); vLLM refuses it (QKVParallelLinear)")
    qkv_here = (heads_here + 2 * kv_here) * head_dim
    return {
        "qkv_proj": LayerShape((hidden, qkv_here * tp), (hidden, qkv_here)),
        "o_proj": LayerShape((heads * head_dim, hidden),
                             (_split(heads * head_dim, tp, "the attention width"), hidden)),
        "gate_up_proj": LayerShape((hidden, 2 * inter),
                                   (hidden, 2 * _split(inter, tp, "intermediate_size"))),
        "down_proj": LayerShape((inter, hidden), (inter // tp, hidden)),
    }


@dataclass(frozen=True)
class _Layer:
    scheme: _Scheme
    group: int
    act: str            # bfloat16 | float16: the model's dtype, the activations' type
    shape: LayerShape
    cc: int             # compute capability as vLLM writes it: 9.0 -> 90
    installed: frozenset[str]


# Each check answers why the kernel cannot take the layer, or None when it can; vLLM's
# can_implement, in the file named, with its platform test reduced to "this is CUDA".
def _cutlass_w4a8(c: _Layer) -> str | None:  # mixed_precision/cutlass.py
    return "needs FP8 activations"  # every scheme here keeps 16-bit activations


def _machete(c: _Layer) -> str | None:  # mixed_precision/machete.py, utils/machete_utils.py
    types = ("uint4", "uint8") if c.scheme.zero_points else ("uint4b8", "uint8b128")
    k, n = c.shape.partition
    if c.cc != 90:
        return "needs compute capability 9.0 exactly"
    if c.scheme.weight_type not in types or c.group not in (-1, 64, 128):
        return "weight type or group size"
    return None if k % 64 == 0 and n % 128 == 0 else f"K={k} not /64 or N={n} not /128"


def _marlin(c: _Layer) -> str | None:  # mixed_precision/marlin.py, utils/marlin_utils.py
    types = ("uint4",) if c.scheme.zero_points else (
        "uint4b8", "uint8b128", "float8_e4m3fn", "float4_e2m1f")
    if c.scheme.weight_type not in types or c.group not in (-1, 32, 64, 128):
        return "weight type or group size"
    k_full, k = c.shape.full[0], c.shape.partition[0]
    if c.group != -1 and c.group < k_full and k % c.group:
        return f"K={k} per rank not divisible by the group size {c.group}"
    return None


def _conch(c: _Layer) -> str | None:  # mixed_precision/conch.py
    if c.scheme.weight_type not in ("uint4", "uint8", "uint4b8", "uint8b128") \
            or c.group not in (-1, 128):
        return "weight type or group size"
    return None if "conch" in c.installed else "conch-triton-kernels is not installed"


def _exllama(c: _Layer) -> str | None:  # mixed_precision/exllama.py
    k_full, n = c.shape.full[0], c.shape.partition[1]
    if n % (32 // c.scheme.bits) or c.act != "float16":
        return "output packing or activations other than float16"
    if c.scheme.weight_type not in ("uint4b8", "uint8b128") or c.group <= 0:
        return "weight type or channelwise scales"
    return None if k_full % c.group == 0 else "group size does not divide K"


def _triton_w4a16(c: _Layer) -> str | None:  # mixed_precision/triton_w4a16.py
    k_full, (k, n) = c.shape.full[0], c.shape.partition
    if c.scheme.weight_type not in ("uint4b8", "uint4") or n % 8:
        return "weight type or N not /8"
    if c.group not in (-1, 32, 64, 128, 256) and c.group != k_full:
        return "group size"
    return None if k % (c.group if c.group != -1 else k) == 0 else "group size does not divide K"


def _humming(c: _Layer) -> str | None:  # mixed_precision/humming.py
    return None if "humming" in c.installed else "humming is not installed"


# _POSSIBLE_KERNELS[PlatformEnum.CUDA] in priority order, with get_min_capability().
_MIXED_PRECISION = (
    ("CutlassW4A8LinearKernel", 90, _cutlass_w4a8),
    ("MacheteLinearKernel", 90, _machete),
    ("MarlinLinearKernel", 75, _marlin),
    ("ConchLinearKernel", 80, _conch),
    ("ExllamaLinearKernel", 60, _exllama),
    ("TritonW4A16LinearKernel", 0, _triton_w4a16),
    ("HummingLinearKernel", 75, _humming),
)


def _candidates(cc: int) -> list[tuple[str, int, Any]]:
    """prioritize_humming: on compute capability 9.0 Humming moves just ahead of Marlin."""
    order = list(_MIXED_PRECISION)
    if cc == 90:
        humming = order.pop(-1)
        order.insert([name for name, _, _ in order].index("MarlinLinearKernel"), humming)
    return order


def _mixed_precision_kernel(layer: _Layer) -> str:
    for name, min_cc, refuses in _candidates(layer.cc):
        if min_cc <= layer.cc and refuses(layer) is None:
            return name
    return "none"  # vLLM raises "Failed to find a kernel that can implement ..."


def _fp8_weight_only_kernel(cc: int, installed: frozenset[str]) -> str:
    """_POSSIBLE_WFP8A16_KERNELS[CUDA]: Humming, then Marlin; neither looks at the shape
    (scaled_mm/humming.py, scaled_mm/marlin.py; Marlin's FP8 path also steps aside under
    VLLM_BATCH_INVARIANT)."""
    if cc < 75:
        return "none"
    return "HummingFP8ScaledMMLinearKernel" if "humming" in installed \
        else "MarlinFP8ScaledMMLinearKernel"


def _act_dtype(config: dict[str, Any]) -> str:
    text = _text_config(config)
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "")
    return "float16" if dtype.endswith("float16") and "bfloat" not in dtype else "bfloat16"


def expected_kernels(config: dict[str, Any], scheme: str, group_size: int,
                     capability: tuple[int, int], tp: int = 1, *,
                     installed: frozenset[str] = VLLM_CUDA_EXTRAS,
                     act_dtype: str | None = None) -> dict[str, str]:
    """Layer kind -> the kernel class vLLM 0.32 picks for it on a CUDA GPU of this compute
    capability at this tensor-parallel size, or "none" where vLLM would refuse the layer.

    ``scheme`` is a key of SCHEMES; ``group_size`` -1 means channelwise scales;
    ``installed`` the optional kernel packages present (default: what vLLM's CUDA wheel
    installs); ``act_dtype`` the model's dtype (default: config.json's, bfloat16 unless it
    says float16). Raises ValueError for an unknown scheme or a size vLLM refuses."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme {scheme!r} is not one of {', '.join(SCHEMES)}")
    cc = capability[0] * 10 + capability[1]
    shapes = layer_shapes(config, tp)
    if cc < 75:  # both schemes' get_min_capability(); CompressedTensorsConfig refuses below
        return dict.fromkeys(shapes, "none")
    if scheme == "fp8":
        return {kind: _fp8_weight_only_kernel(cc, installed) for kind in shapes}
    act = act_dtype or _act_dtype(config)
    return {kind: _mixed_precision_kernel(
                _Layer(SCHEMES[scheme], group_size, act, shape, cc, installed))
            for kind, shape in shapes.items()}
