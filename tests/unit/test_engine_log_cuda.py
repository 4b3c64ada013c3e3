"""The kernel path and the memory at load as vLLM 0.32's CUDA path reports them (issue 35,
item 7): log lines made from the format strings in vLLM's source, and the expected kernel
per layer held to vLLM's own kernel chooser with the platform made to answer as a CUDA GPU.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

from workbench.quantize.kernels import expected_kernels, layer_shapes
from workbench.serve.engine_log import kernel_choices, kernel_uses, memory_at_load

# The published config.json of each model (Hugging Face): the fields the shapes come from.
LLAMA_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"}
LLAMA_70B = {"hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
             "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"}
SMOLLM2_135M = {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
                "num_key_value_heads": 3, "torch_dtype": "bfloat16"}
MODELS = [(LLAMA_8B, tp) for tp in (1, 2, 4, 8)] + [(LLAMA_70B, tp) for tp in (1, 2, 4, 8)] \
    + [(SMOLLM2_135M, tp) for tp in (1, 3)]

# vllm/logger.py:28 (0.32.0), VLLM_LOGGING_PREFIX unset; _DATE_FORMAT is "%m-%d %H:%M:%S".
VLLM_FORMAT = ("(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s "
               "[%(fileinfo)s:%(lineno)d] %(message)s")
# The logger calls, vLLM 0.32.0:
# compressed_tensors/schemes/compressed_tensors_wNa16.py:138, once per kernel per process:
#   logger.info("Using %s for CompressedTensorsWNA16", kernel_type.__name__)
WNA16 = "Using %s for CompressedTensorsWNA16"
# model_executor/kernels/linear/__init__.py:923, choose_mp_linear_kernel:
#   logger.info_once("Using %s for mixed-precision linear", kernel.__name__)
MIXED = "Using %s for mixed-precision linear"
# platforms/cuda.py:507: logger.info_once("Using %s attention backend out of potential
#   backends: %s.", selected_backend.name, "[" + ... + "]")
ATTENTION = "Using %s attention backend out of potential backends: %s."
# v1/worker/gpu_model_runner.py:5150 (and v1/worker/gpu/model_runner.py:425):
#   logger.info_once("Model loading took %s GiB memory and %.6f seconds",
#                    format_gib(self.model_memory_usage), ...)
LOADING = "Model loading took %s GiB memory and %.6f seconds"
# v1/worker/gpu_worker.py:759: logger.info_once("Available KV cache memory: %s GiB", ...)
AVAILABLE = "Available KV cache memory: %s GiB"
# v1/core/kv_cache_utils.py:2328: logger.info_once("%s KV cache size: %s tokens, "
#   "Maximum concurrency for %s tokens per request: %.2fx", pools, f"{num_tokens:,}", ...)
KV_SIZE = "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"
# v1/worker/gpu_worker.py:657, an f-string, with --kv-cache-memory-bytes:
RESERVED = ("Initial free memory {} GiB, reserved {} GiB memory for KV Cache as specified by "
            "kv_cache_memory_bytes config and skipped memory profiling. This does not respect"
            " the gpu_memory_utilization config.")
# v1/worker/cpu_worker.py:229 and :250, f-strings:
CPU_EXPLICIT = "Explicitly set ({}/{}) GiB for KV cache on node {}."
CPU_AUTO = ("Auto set ({}/{}) GiB for KV cache on node {}, with {} GiB requested memory for "
            "the worker. {} GiB memory was consumed by non-kv usages.")
GIB = 1 << 30


def line(process: str, where: str, message: str) -> str:
    fileinfo, lineno = where.split(":")
    return VLLM_FORMAT % {"vllm_process_name": process, "process": 4242, "levelname": "INFO",
                          "asctime": "12-03 20:25:01", "fileinfo": fileinfo,
                          "lineno": int(lineno), "message": message}


def smollm2_hopper_log() -> str:
    """A W4A16 (group 64) SmolLM2-135M at TP 3 on an H100/H200 without Humming: gate_up
    runs on Machete, the rest on Marlin; each worker logs each kernel once, in the order its
    layers are built (qkv first)."""
    lines = [line("EngineCore_DP0", "cuda.py:507",
                  ATTENTION % ("FLASH_ATTN", "['FLASH_ATTN', 'FLASHINFER']"))]
    for worker in ("Worker_TP0", "Worker_TP1", "Worker_TP2"):
        lines += [line(worker, "compressed_tensors_wNa16.py:138", WNA16 % "MarlinLinearKernel"),
                  line(worker, "compressed_tensors_wNa16.py:138", WNA16 % "MacheteLinearKernel")]
    lines += [line("Worker_TP0", "__init__.py:923", MIXED % "MarlinLinearKernel"),
              line("Worker_TP0", "__init__.py:923", MIXED % "MacheteLinearKernel")]
    return "\n".join(lines) + "\n"


def test_a_mixed_hopper_log_records_every_kernel_it_names() -> None:
    log = smollm2_hopper_log()
    choices = kernel_choices(log)
    assert choices["CompressedTensorsWNA16"] == "MacheteLinearKernel, MarlinLinearKernel"
    assert choices["mixed-precision linear"] == "MacheteLinearKernel, MarlinLinearKernel"
    assert choices["attention"] == "FLASH_ATTN"
    assert kernel_uses(log)["CompressedTensorsWNA16"] == ["MarlinLinearKernel",
                                                           "MacheteLinearKernel"]
    # the log names the same kernels the table puts on the layers
    table = expected_kernels(SMOLLM2_135M, "uint4b8", 64, (9, 0), tp=3, installed=frozenset())
    assert table == {"qkv_proj": "MarlinLinearKernel", "o_proj": "MarlinLinearKernel",
                     "gate_up_proj": "MacheteLinearKernel", "down_proj": "MarlinLinearKernel"}
    assert set(kernel_uses(log)["CompressedTensorsWNA16"]) == set(table.values())


def test_the_memory_at_load_is_read_from_a_cuda_engines_log() -> None:
    log = "\n".join([
        line("Worker_TP0", "gpu_model_runner.py:5150", LOADING % ("14.99", 12.345678)),
        line("Worker_TP0", "gpu_worker.py:759", AVAILABLE % "97.23"),
        line("EngineCore_DP0", "kv_cache_utils.py:2328",
             KV_SIZE % ("GPU", f"{796_512:,}", f"{8_192:,}", 97.23)),
    ])
    assert memory_at_load(log) == {"weights_bytes": round(14.99 * GIB),
                                   "kv_cache_bytes": round(97.23 * GIB),
                                   "kv_cache_tokens": 796_512}


def test_an_explicit_kv_cache_and_the_cpu_workers_lines_are_read_too() -> None:
    gpu = line("Worker_TP1", "gpu_worker.py:657", RESERVED.format("139.1", "40.0"))
    assert memory_at_load(gpu) == {"kv_cache_bytes": 40 * GIB}
    explicit = line("EngineCore", "cpu_worker.py:229", CPU_EXPLICIT.format("4.0", "62.71", 0))
    auto = line("EngineCore", "cpu_worker.py:250",
                CPU_AUTO.format("10.5", "62.71", 0, "12.0", "1.5"))
    cpu_size = line("EngineCore", "kv_cache_utils.py:2328",
                    KV_SIZE % ("CPU", f"{174_752:,}", f"{2_048:,}", 85.33))
    assert memory_at_load(explicit + "\n" + cpu_size) == {"kv_cache_bytes": 4 * GIB,
                                                          "kv_cache_tokens": 174_752}
    assert memory_at_load(auto) == {"kv_cache_bytes": round(10.5 * GIB)}
    assert memory_at_load("(APIServer pid=1) INFO 12-03 [api_server.py:1] ready\n") == {}


def test_the_table_splits_shapes_as_tensor_parallel_layers_do() -> None:
    shapes = layer_shapes(LLAMA_70B, tp=8)
    assert shapes["qkv_proj"].partition == (8192, (8 + 2 * 1) * 128)
    assert shapes["down_proj"].partition == (28672 // 8, 8192)
    # fewer key-value heads than ranks: each rank holds one, replicated
    assert layer_shapes(LLAMA_8B, tp=16)["qkv_proj"].partition == (4096, (2 + 2) * 128)
    with pytest.raises(ValueError, match="tensor-parallel size 2 does not divide"):
        layer_shapes(SMOLLM2_135M, tp=2)
    with pytest.raises(ValueError, match="scheme 'int3'"):
        expected_kernels(LLAMA_8B, "int3", 128, (9, 0))


def test_the_table_without_vllm_puts_each_kind_of_layer_on_its_kernel() -> None:
    hopper = expected_kernels(SMOLLM2_135M, "uint4b8", 64, (9, 0))
    assert hopper["gate_up_proj"] == "MacheteLinearKernel"
    assert hopper["qkv_proj"] == "HummingLinearKernel"  # vLLM's CUDA wheel brings Humming
    assert set(expected_kernels(LLAMA_8B, "uint4b8", 128, (9, 0), tp=8).values()) \
        == {"MacheteLinearKernel"}
    assert set(expected_kernels(LLAMA_8B, "uint4b8", 128, (8, 0)).values()) \
        == {"MarlinLinearKernel"}
    assert set(expected_kernels(LLAMA_8B, "fp8", -1, (8, 0)).values()) \
        == {"HummingFP8ScaledMMLinearKernel"}


# ---- held to vLLM's own code (skipped where vllm is not installed) ---------------------
# vLLM decides on CUDA through `current_platform` (`_enum`, `get_device_capability`, both
# read by is_cuda(), is_device_capability(), has_device_capability(): platforms/interface.py)
# and through the tensor-parallel size its linear layers ask for. Nothing in
# MacheteLinearKernel.can_implement or MarlinLinearKernel.can_implement calls a CUDA op in
# 0.32 (machete_utils.check_machete_supports_shape is arithmetic); the CUDA-only gap is the
# optional packages (Humming, Conch), whose presence is set here as the table assumes.
class Chosen(Exception):
    """Raised by the spy once vLLM has chosen: no weights are allocated."""


@pytest.fixture
def cuda_vllm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    pytest.importorskip("vllm", reason="needs vLLM's own kernel chooser (the engine env)")
    import vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method  # noqa: F401
    import vllm.model_executor.layers.linear as linear
    import vllm.model_executor.layers.quantization.online.fp8  # noqa: F401
    import vllm.model_executor.parameter as parameter
    from vllm.model_executor.kernels.linear.mixed_precision import humming
    from vllm.model_executor.kernels.linear.scaled_mm import humming as humming_fp8
    from vllm.model_executor.layers.quantization.compressed_tensors.schemes import (
        compressed_tensors_wNa16 as wna16,
    )
    from vllm.platforms import PlatformEnum, current_platform
    from vllm.platforms.interface import DeviceCapability

    # imported above while still the CPU platform: some modules ask CUDA ops at import
    state = {"cc": DeviceCapability(9, 0), "tp": 1, "humming": True}
    platform = type(current_platform)
    monkeypatch.setattr(platform, "_enum", PlatformEnum.CUDA)
    monkeypatch.setattr(platform, "get_device_capability",
                        classmethod(lambda cls, device_id=0: state["cc"]))
    for module in (linear, parameter):
        monkeypatch.setattr(module, "get_tensor_model_parallel_world_size", lambda: state["tp"])
        monkeypatch.setattr(module, "get_tensor_model_parallel_rank", lambda: 0)
    for module in (humming, humming_fp8):
        monkeypatch.setattr(module, "has_humming", lambda: state["humming"])
    monkeypatch.setattr(wna16.CompressedTensorsWNA16, "_kernel_backends_being_used", set())
    state["wna16"] = wna16
    yield state


def _ct_config(scheme: str, group: int) -> Any:
    """compressed-tensors' own config for a weight-only scheme, read by vLLM's own
    CompressedTensorsConfig (as a checkpoint's quantization_config is)."""
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
    )
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsConfig,
    )

    weights = QuantizationArgs(num_bits=8 if scheme.startswith("uint8") else 4, type="int",
                               symmetric=scheme in ("uint4b8", "uint8b128"),
                               strategy="channel" if group == -1 else "group",
                               group_size=None if group == -1 else group)
    qc = QuantizationConfig(config_groups={"g": QuantizationScheme(targets=["Linear"],
                                                                   weights=weights)},
                            format="pack-quantized", ignore=["lm_head"],
                            quant_method="compressed-tensors")
    return CompressedTensorsConfig.from_config(qc.model_dump())


def _layer_makers(config: dict, quant: Any, dtype: Any) -> dict[str, Any]:
    """The four linear layers of a decoder block, as vLLM's Llama builds them."""
    import vllm.model_executor.layers.linear as linear

    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    common = {"bias": False, "params_dtype": dtype, "quant_config": quant}
    return {
        "qkv_proj": lambda: linear.QKVParallelLinear(hidden, head_dim, heads, kv,
                                                     prefix="l.0.self_attn.qkv_proj", **common),
        "o_proj": lambda: linear.RowParallelLinear(heads * head_dim, hidden,
                                                   prefix="l.0.self_attn.o_proj", **common),
        "gate_up_proj": lambda: linear.MergedColumnParallelLinear(
            hidden, [inter] * 2, prefix="l.0.mlp.gate_up_proj", **common),
        "down_proj": lambda: linear.RowParallelLinear(inter, hidden,
                                                      prefix="l.0.mlp.down_proj", **common),
    }


def _vllm_choices(state: Any, config: dict, quant: Any, dtype: Any) -> dict[str, str]:
    """Layer kind -> the kernel vLLM's choose_mp_linear_kernel returns for the
    MPLinearLayerConfig that vLLM's CompressedTensorsWNA16.create_weights builds for it."""
    found = {}
    for kind, make in _layer_makers(config, quant, dtype).items():
        try:
            make()
        except Chosen as chosen:
            found[kind] = chosen.args[0]
        except RuntimeError as refused:  # "Quantization scheme is not supported for the
            assert "not supported for the current GPU" in str(refused)  # current GPU"
            found[kind] = "none"
    return found


def _spy_on_the_choice(state: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    chooser = state["wna16"].choose_mp_linear_kernel

    def spy(c: Any, compute_capability: int | None = None) -> Any:
        try:
            name = chooser(c, compute_capability).__name__
        except ValueError:  # "Failed to find a kernel that can implement ..."
            name = "none"
        raise Chosen(name)

    monkeypatch.setattr(state["wna16"], "choose_mp_linear_kernel", spy)


CAPABILITIES = [(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]
SCHEME_GROUPS = [("uint4b8", 128), ("uint4", 128), ("uint8b128", 128), ("uint8", 128),
                 ("uint4b8", 64), ("uint4b8", 32), ("uint4b8", -1),
                 # group 256: past Machete and Marlin to Triton (4-bit), Exllama (8-bit, fp16)
                 ("uint4b8", 256), ("uint4", 256), ("uint8b128", 256)]


@pytest.mark.parametrize("humming", [True, False], ids=["with-humming", "without-humming"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_table_agrees_with_vllms_own_choice_for_every_layer(
        cuda_vllm: Any, monkeypatch: pytest.MonkeyPatch, humming: bool, dtype: str) -> None:
    import torch

    _spy_on_the_choice(cuda_vllm, monkeypatch)
    cuda_vllm["humming"] = humming
    installed = frozenset({"humming"} if humming else set())
    from vllm.platforms.interface import DeviceCapability

    wrong, seen = [], set()
    for scheme, group in SCHEME_GROUPS:
        quant = _ct_config(scheme, group)
        for config, tp in MODELS:
            cuda_vllm["tp"] = tp
            for cc in CAPABILITIES:
                cuda_vllm["cc"] = DeviceCapability(*cc)
                theirs = _vllm_choices(cuda_vllm, config, quant, getattr(torch, dtype))
                ours = expected_kernels(config, scheme, group, cc, tp, installed=installed,
                                        act_dtype=dtype)
                seen |= set(theirs.values())
                if ours != theirs:
                    wrong.append((config["hidden_size"], tp, scheme, group, cc, ours, theirs))
    assert not wrong, wrong[:3]
    # the cases reach every kernel that takes a 16-bit-activation scheme here
    assert {"MacheteLinearKernel", "MarlinLinearKernel", "TritonW4A16LinearKernel",
            "none"} <= seen
    assert ("HummingLinearKernel" in seen) == humming
    assert ("ExllamaLinearKernel" in seen) == (dtype == "float16")


@pytest.mark.parametrize("humming", [True, False], ids=["with-humming", "without-humming"])
def test_fp8_weight_only_layers_agree_with_vllms_own_choice(cuda_vllm: Any,
                                                           humming: bool) -> None:
    """CompressedTensorsW8A16Fp8 -> init_wfp8_a16_linear_kernel: its config as built there
    (compressed_tensors_w8a16_fp8.py:112, kernels/linear/__init__.py:1099)."""
    import torch
    from compressed_tensors.quantization import QuantizationStrategy
    from vllm.model_executor.kernels.linear import (
        _POSSIBLE_WFP8A16_KERNELS,
        FP8ScaledMMLinearLayerConfig,
        choose_scaled_mm_linear_kernel,
    )
    from vllm.model_executor.layers.quantization.compressed_tensors.utils import (
        STRATEGY_TO_WEIGHT_QUANT_KEY,
    )
    from vllm.model_executor.layers.quantization.utils.quant_utils import kFp8DynamicTensorSym
    from vllm.platforms.interface import DeviceCapability

    cuda_vllm["humming"] = humming
    for cc in CAPABILITIES[1:]:  # below 7.5 compressed-tensors refuses the scheme first
        cuda_vllm["cc"] = DeviceCapability(*cc)
        for kind, shape in layer_shapes(LLAMA_8B, tp=2).items():
            config = FP8ScaledMMLinearLayerConfig(
                weight_quant_key=STRATEGY_TO_WEIGHT_QUANT_KEY[QuantizationStrategy.CHANNEL],
                activation_quant_key=kFp8DynamicTensorSym,
                weight_shape=shape.partition[::-1], input_dtype=torch.bfloat16,
                out_dtype=torch.bfloat16)
            theirs = choose_scaled_mm_linear_kernel(config, _POSSIBLE_WFP8A16_KERNELS,
                                                    quantization="w8a16_fp8").__name__
            ours = expected_kernels(LLAMA_8B, "fp8", -1, cc, tp=2,
                                    installed=frozenset({"humming"} if humming else set()))
            assert ours[kind] == theirs, (cc, kind)


def test_the_log_vllm_writes_for_a_mixed_hopper_model_records_both_kernels(
        cuda_vllm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """SmolLM2-135M W4A16 (group 64) at TP 3 on compute capability 9.0 without Humming,
    built for real by vLLM's layers and scheme, its log lines written by vLLM's own
    formatter with a worker's prefix, then read by the workbench."""
    import io

    import torch
    import vllm.logger as vllm_logger
    from vllm.logging_utils import NewLineFormatter

    cuda_vllm["humming"], cuda_vllm["tp"] = False, 3
    monkeypatch.setattr(logging, "_logRecordFactory",
                        vllm_logger._VllmLogRecordFactory(logging.getLogRecordFactory()))
    monkeypatch.setattr(vllm_logger, "_vllm_process_info", ("Worker_TP0", os.getpid()))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(NewLineFormatter(vllm_logger._FORMAT, vllm_logger._DATE_FORMAT))
    root = logging.getLogger("vllm")
    monkeypatch.setattr(root, "level", logging.INFO)
    root.addHandler(handler)
    try:
        layers = {kind: make() for kind, make in _layer_makers(
            SMOLLM2_135M, _ct_config("uint4b8", 64), torch.bfloat16).items()}
    finally:
        root.removeHandler(handler)
    log = stream.getvalue()
    assert "(Worker_TP0 pid=" in log
    built = {kind: type(layer.scheme.kernel).__name__ for kind, layer in layers.items()}
    assert built == expected_kernels(SMOLLM2_135M, "uint4b8", 64, (9, 0), tp=3,
                                     installed=frozenset())
    assert kernel_choices(log)["CompressedTensorsWNA16"] \
        == "MacheteLinearKernel, MarlinLinearKernel"
    assert set(kernel_uses(log)["CompressedTensorsWNA16"]) == set(built.values())
