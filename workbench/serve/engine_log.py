"""What the engine says about itself: the cause of a failure in its log, the kernels it
chose, and its KV-cache configuration from /metrics."""

from __future__ import annotations

import re

__all__ = ["kernel_choices", "parse_cache_info", "root_cause"]

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


def parse_cache_info(metrics_text: str) -> dict[str, str]:
    """The labels of vllm:cache_config_info (KV dtype, blocks, capacity in tokens)."""
    for line in metrics_text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            return dict(_LABEL.findall(line))
    return {}


# vLLM logs the kernel it picked for each quantisation scheme, e.g. "Using
# CPUWNA16LinearKernel for CompressedTensorsWNA16", "Selected MacheteLinearKernel for
# CompressedTensorsWNA16", and its attention backend, e.g. "Using FLASH_ATTN backend".
_KERNEL = re.compile(r"\] (?:Using|Selected) (\w+) for (CompressedTensors\w+|[\w-]+ linear)")
_ATTENTION = re.compile(r"\] Using (\w+) (?:attention )?backend")
_KV_DTYPE = re.compile(r"\] Using (fp8\w*) data type to store kv cache")


def kernel_choices(log_text: str) -> dict[str, str]:
    """What the engine's log says it chose: scheme or layer kind -> kernel, the attention
    backend, the KV-cache storage type (the last word wins: a worker may repeat it)."""
    found = {scheme: kernel for kernel, scheme in _KERNEL.findall(log_text)}
    for key, pattern in (("attention", _ATTENTION), ("kv_cache", _KV_DTYPE)):
        matches = pattern.findall(log_text)
        if matches:
            found[key] = matches[-1]
    return found
