"""What the engine says about itself: the cause of a failure in its log, the kernels it
chose, the memory its weights and KV cache took at load, and its KV-cache configuration
from /metrics."""

from __future__ import annotations

import re

__all__ = ["kernel_choices", "kernel_uses", "log_facts", "memory_at_load", "parse_cache_info",
           "root_cause", "scheduler_flags", "served_on_zen"]

_LABEL = re.compile(r'(\w+)="([^"]*)"')
# A Python exception line in the engine's log, possibly behind a worker prefix, e.g.
# "(EngineCore pid=12) ValueError: ... 1.41 GiB KV cache is needed ...".
_ERROR_LINE = re.compile(r"(?:^|\) |\] )((?:[\w.]+\.)?\w*(?:Error|Exception)\b:? .+)$")
# Lines that wrap the real cause rather than state it.
_WRAPPERS = ("root cause above", "initialization failed", "Traceback")


def root_cause(log_text: str) -> str | None:
    """The line of the engine's log that says why it failed: the last exception line that
    is not a wrapper pointing elsewhere ("See root cause above")."""
    errors = [m[1].strip() for line in log_text.splitlines()
              if (m := _ERROR_LINE.search(line.strip()))]
    causes = [e for e in errors if not any(w in e for w in _WRAPPERS)]
    found = causes or errors
    return found[-1][:400] if found else None


# The engine core's first line on every platform ("Initializing a V1 LLM engine (v0.32.0)
# with config: model=..., enable_prefix_caching=True, enable_chunked_prefill=True, ...":
# vllm/v1/engine/core.py) states its scheduling choices as the config resolved them.
_FLAG = re.compile(r"\b(enable_chunked_prefill|enable_prefix_caching)=(True|False)\b")


def scheduler_flags(log_text: str) -> dict[str, bool]:
    """Chunked prefill and prefix caching as the engine resolved them (its log); empty
    when the log does not say (an endpoint, a log cut short)."""
    return {name.removeprefix("enable_"): value == "True"
            for name, value in _FLAG.findall(log_text)}


def parse_cache_info(metrics_text: str) -> dict[str, str]:
    """The labels of vllm:cache_config_info (KV dtype, blocks, capacity in tokens)."""
    for line in metrics_text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            return dict(_LABEL.findall(line))
    return {}


# vLLM logs the kernel it picked for each quantisation scheme, e.g. "Using
# CPUWNA16LinearKernel for CompressedTensorsWNA16", "Selected MacheteLinearKernel for
# CompressedTensorsWNA16", and its attention backend, e.g. "Using FLASH_ATTN backend".
# vLLM 0.32 picks the weight-only kernel per layer from the layer's shape and logs each
# kernel once per process, not each layer: `logger.info("Using %s for
# CompressedTensorsWNA16", ...)` behind a per-class set of names already logged
# (compressed_tensors/schemes/compressed_tensors_wNa16.py:138), and `logger.info_once("Using
# %s for mixed-precision linear", ...)`, once per kernel name
# (model_executor/kernels/linear/__init__.py:923). So every kernel used reaches the log, but
# not which layer ran on it; workbench/quantize/kernels.py says that from the shapes.
_KERNEL = re.compile(r"\] (?:Using|Selected) (\w+) for "
                     r"(CompressedTensors\w+|Quark\w+|\w+LinearMethod|[\w-]+ linear)")
# "Using %s attention backend out of potential backends: %s." (platforms/cuda.py:507), or
# "Using %s backend." with the enum itself when one was asked for (platforms/cuda.py:446).
_ATTENTION = re.compile(r"\] Using (?:AttentionBackendEnum\.)?(\w+) (?:attention )?backend")
_KV_DTYPE = re.compile(r"\] Using (fp8\w*) data type to store kv cache")
# "AMD Zen CPU detected with zentorch installed, using ZenCpuPlatform." (info; vllm/platforms/
# __init__.py, cpu_platform_plugin): the one platform choice vLLM logs above debug level, but
# on import, before its handler exists, so it is not in a server's log; the workbench's
# launcher says the same (subprocesses/vllm_serve.py, PLATFORM_LINE). Only Zen's is kept: a
# record without the key served on vLLM's own platform, as every record before it did.
ZEN_PLATFORM_NAME = "ZenCpuPlatform"
_ZEN = re.compile(r"(?:\] AMD Zen CPU detected with zentorch installed, using "
                  rf"|^workbench: vLLM serves on )({ZEN_PLATFORM_NAME})\b", re.MULTILINE)


def served_on_zen(kernels: dict[str, str]) -> bool:
    """Whether an engine's kernel_choices() say vLLM served on AMD Zen's platform."""
    return kernels.get("platform") == ZEN_PLATFORM_NAME


def kernel_uses(log_text: str) -> dict[str, list[str]]:
    """Scheme or layer kind -> every kernel the engine's log says it used for it, in the
    order first logged (each worker of a tensor-parallel engine repeats them)."""
    found: dict[str, list[str]] = {}
    for kernel, scheme in _KERNEL.findall(log_text):
        if kernel not in found.setdefault(scheme, []):
            found[scheme].append(kernel)
    return found


def kernel_choices(log_text: str) -> dict[str, str]:
    """What the engine's log says it chose: scheme or layer kind -> its kernels (sorted,
    comma-separated when layers of different shapes ran on different kernels), the
    attention backend, the KV-cache storage type, and `platform` where vLLM served on AMD
    Zen's (the last word wins: a worker may repeat it)."""
    found = {scheme: ", ".join(sorted(kernels))
             for scheme, kernels in kernel_uses(log_text).items()}
    for key, pattern in (("attention", _ATTENTION), ("kv_cache", _KV_DTYPE),
                         ("platform", _ZEN)):
        matches = pattern.findall(log_text)
        if matches:
            found[key] = matches[-1]
    return found


# What the engine says of its memory once the model is loaded, in GiB rounded to two
# places (vllm/utils/mem_utils.py format_gib), so each figure is good to about 5 MiB. On a
# GPU the node's first rank logs them (info_once, scope "local", vllm/logger.py): the
# figures are one GPU's. vLLM 0.32:
#  "Model loading took %s GiB memory and %.6f seconds" (v1/worker/gpu_model_runner.py:5150,
#   v1/worker/gpu/model_runner.py:425; the CPU model runner logs no such line)
#  "Available KV cache memory: %s GiB" (v1/worker/gpu_worker.py:759), or with
#   --kv-cache-memory-bytes "Initial free memory %s GiB, reserved %s GiB memory for KV
#   Cache as specified by kv_cache_memory_bytes config ..." (gpu_worker.py:657)
#  "Explicitly set (%s/%s) GiB for KV cache on node %s." and "Auto set (%s/%s) GiB for KV
#   cache on node ..." (v1/worker/cpu_worker.py:229, 250)
#  "%s KV cache size: %s tokens, Maximum concurrency ..." with the count written with
#   thousands commas (v1/core/kv_cache_utils.py:2328)
_GIB = 1 << 30
_MEMORY = (
    ("weights_bytes", re.compile(r"\] Model loading took ([\d.]+) GiB memory")),
    ("kv_cache_bytes", re.compile(
        r"\] (?:Available KV cache memory: ([\d.]+) GiB"
        r"|Initial free memory [\d.]+ GiB, reserved ([\d.]+) GiB memory for KV Cache"
        r"|(?:Explicitly|Auto) set \(([\d.]+)/[\d.]+\) GiB for KV cache)")),
)
_KV_TOKENS = re.compile(r"\] [\w +]*KV cache size: ([\d,]+) tokens")


def memory_at_load(log_text: str) -> dict[str, int]:
    """The weights' and the KV cache's size in bytes, and the KV cache's capacity in tokens,
    as the engine's log states them at load (keys weights_bytes, kv_cache_bytes,
    kv_cache_tokens; a key is absent when the log does not say it; the last word wins)."""
    found: dict[str, int] = {}
    for key, pattern in _MEMORY:
        for match in pattern.finditer(log_text):
            gib = next(g for g in match.groups() if g is not None)
            found[key] = round(float(gib) * _GIB)
    tokens = _KV_TOKENS.findall(log_text)
    if tokens:
        found["kv_cache_tokens"] = int(tokens[-1].replace(",", ""))
    return found


def log_facts(log_text: str) -> tuple[dict[str, str], dict[str, int], dict[str, bool]]:
    """What a started engine's log says of it: its kernels, its memory at load and its
    scheduling flags."""
    return kernel_choices(log_text), memory_at_load(log_text), scheduler_flags(log_text)
