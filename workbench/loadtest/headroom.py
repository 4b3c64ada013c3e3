"""Memory headroom of one served model: what the weights take, how much KV cache the engine
holds and how many sequences of the workload's length fit in it, and what the engine's
processes peaked at while serving.

Capacity figures come from the engine's own `vllm:cache_config_info`, whose labels vLLM
renders with str() (vllm/config/cache.py `CacheConfig.metrics_info`, 0.32), so a field the
platform leaves unset reads "None": on CUDA `kv_cache_memory_bytes` does unless the user
set it. Such a label is absent here (None), never 0 taken for a measurement.

Peaks are sampled while the suites and the load test run (the load test alone where the
suites had a session of their own, measure/sessions.py): the engine process group's
resident memory from /proc (CPU); on a GPU the device memory held by the engine's own
processes (NVML, per process: not another tenant's) and the least free memory left on its
devices, which is the headroom that means something there: vLLM preallocates
gpu_memory_utilization x the device, so the engine's total is nearly the same for every
model (docs/scale.md).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from workbench.mechanisms.gpu import (
    GpuHost,
    device_free_bytes,
    device_total_bytes,
    nvml,
    process_memory_bytes,
    visible_gpus,
)
from workbench.mechanisms.processes import group_pids

__all__ = ["Headroom", "PeakSampler", "cache_label", "group_rss_bytes", "headroom",
           "weights_bytes"]


@dataclass(frozen=True)
class Headroom:
    weights_bytes: int | None  # the checkpoint's tensors on disk; None: not here (endpoint)
    kv_cache_dtype: str
    # KV capacity of all data-parallel replicas; None: the engine did not report it
    kv_cache_tokens: int | None
    kv_cache_blocks: int | None
    block_size: int | None
    # the KV pool over the engine's devices: the label (per device) x devices, or what the
    # engine logged at load; None: neither (CUDA sizes it from gpu_memory_utilization)
    kv_cache_memory_bytes: int | None
    sequence_tokens: int  # the workload's prompt + output length
    max_concurrent_sequences: int | None  # whole sequences of that length the KV blocks hold
    # CPU: the engine process group's resident memory, sampled; None: no process here
    peak_engine_rss_bytes: int | None
    # GPU: device memory the engine's own processes hold (NVML), sampled; 0 on CPU; None
    # at an endpoint, or where NVML never listed them (a container's PIDs are not NVML's)
    peak_gpu_memory_bytes: int | None
    peak_kv_cache_usage: float  # the engine's vllm:kv_cache_usage_perc, highest sampled
    preemptions: int
    devices: int = 1  # devices the engine holds (tensor x pipeline x data parallel)
    data_parallel_size: int = 1  # replicas, each with its own KV cache
    # the weights as the engine loaded them onto its devices (its log); None: not reported
    weights_loaded_bytes: int | None = None
    # the engine's visible devices (NVML): their memory, the least of it left free while
    # serving, and that as a share of the total; None on a CPU and at an endpoint
    device_memory_total_bytes: int | None = None
    device_memory_free_bytes: int | None = None
    device_margin: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def cache_label(info: Mapping[str, str], key: str) -> int | None:
    """A number label of vllm:cache_config_info; None where it is missing, empty, or the
    str() of a field vLLM left unset ("None")."""
    text = (info.get(key) or "").strip()
    if text in ("", "None"):
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return int(float(text))
        except ValueError:
            return None


def weights_bytes(model_dir: Path) -> int:
    return sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))


def group_rss_bytes(pgid: int) -> int:
    """Resident memory of every process in a process group (the engine and its workers).

    Shared pages count once per process, so this can overstate; it is the figure an
    operator's `ps` would add up, and it moves with what the candidate changes."""
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in group_pids(pgid):
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue  # the process ended while being read
    return total


class PeakSampler:
    """Samples the engine's memory and KV-cache usage in a background thread."""

    def __init__(self, pgid: int | None, kv_usage: Callable[[], float],
                 interval_s: float = 0.25) -> None:
        """pgid: the engine's process group; None for an endpoint, whose processes and
        devices are not on this machine (only its KV usage gauge is sampled)."""
        self.pgid, self.kv_usage, self.interval_s = pgid, kv_usage, interval_s
        self.peak_rss = self.peak_gpu = 0
        self.peak_kv = 0.0
        # the GPUs CUDA gives the engine (it inherits this process's CUDA_VISIBLE_DEVICES,
        # which a fanned-out sweep sets per candidate); None: none, probed at first sample
        self.gpus: GpuHost | None = None
        self.least_free: int | None = None  # bytes left on those devices, lowest sampled
        self.gpu_seen = False  # NVML listed one of the engine's processes
        self._probed = False
        self._held = contextlib.ExitStack()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> None:
        if self.pgid is not None:
            self.peak_rss = max(self.peak_rss, group_rss_bytes(self.pgid))
            self._sample_devices(self.pgid)
        try:
            self.peak_kv = max(self.peak_kv, float(self.kv_usage()))
        except Exception:  # noqa: BLE001 - a missed sample is not worth failing a run for
            pass

    def _sample_devices(self, pgid: int) -> None:
        if not self._probed:
            self.gpus, self._probed = visible_gpus(), True
        if self.gpus is None:
            return
        held = process_memory_bytes(set(group_pids(pgid)), self.gpus)
        self.gpu_seen = self.gpu_seen or held > 0
        self.peak_gpu = max(self.peak_gpu, held)
        free = device_free_bytes(self.gpus)
        if free is not None:
            self.least_free = free if self.least_free is None else min(self.least_free, free)

    def __enter__(self) -> PeakSampler:
        if self.pgid is not None:
            self._held.enter_context(nvml())  # one NVML init for the whole sampling
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._held.close()


def _capacity(info: Mapping[str, str], sequence_tokens: int, replicas: int
              ) -> tuple[int | None, int | None, int | None, int | None]:
    """(tokens, blocks, block size, whole sequences that fit) over all replicas.

    vLLM's front end sums num_gpu_blocks over its data-parallel engines and keeps
    kv_cache_size_tokens per engine (vllm/v1/engine/core_client.py
    `_apply_ready_response`, 0.32: "Sum num_gpu_blocks from all engines in DP case";
    "Keep these as per-engine cache_config_info values; do not sum across DP"), so the
    blocks are taken as they are and the tokens times the replicas. A sequence lives in
    one replica: whole sequences are counted per replica (its share of the blocks)."""
    engine_tokens = cache_label(info, "kv_cache_size_tokens")
    blocks = cache_label(info, "num_gpu_blocks")
    block_size = cache_label(info, "block_size")
    tokens = engine_tokens * replicas if engine_tokens is not None else None
    # the engine allocates whole blocks: a sequence takes ceil(length / block size) of them
    per_sequence = -(-sequence_tokens // block_size) if block_size else 0
    if per_sequence and blocks is not None:
        fits: int | None = blocks // replicas // per_sequence * replicas
    elif engine_tokens is not None:
        fits = engine_tokens // max(sequence_tokens, 1) * replicas
    else:
        fits = None
    return tokens, blocks, block_size, fits


def _times(value: int | None, devices: int) -> int | None:
    return value * devices if value is not None else None


def _device_figures(sampler: PeakSampler) -> tuple[int | None, int | None, float | None]:
    """(total, least free, free / total) of the engine's devices; None without a GPU."""
    if sampler.pgid is None or sampler.gpus is None:
        return None, None, None
    total, free = device_total_bytes(sampler.gpus), sampler.least_free
    margin = round(free / total, 4) if free is not None and total else None
    return total, free, margin


def _peak_gpu(sampler: PeakSampler) -> int | None:
    if sampler.pgid is None:
        return None  # an endpoint's devices are not here
    if sampler.gpus is not None and not sampler.gpu_seen:
        return None  # on a GPU, but NVML never listed the engine's processes
    return sampler.peak_gpu


def headroom(model_dir: Path | None, cache_info: dict[str, str], sequence_tokens: int,
             sampler: PeakSampler, preemptions: int, data_parallel_size: int = 1,
             devices: int = 1, engine_memory: dict[str, int] | None = None) -> Headroom:
    """model_dir None: the weights are not on this machine (an endpoint); nor are its
    processes (sampler.pgid None).

    engine_memory: what one worker logged at load, per device as vLLM logs it
    ("weights_bytes": "Model loading took … GiB", "kv_cache_bytes": "Available KV cache
    memory: … GiB"); figures per device count once per device the engine holds, like the
    per-device `kv_cache_memory_bytes` label (vllm/config/cache.py: "Size of KV Cache per
    GPU in bytes"), which wins where it is set."""
    local = sampler.pgid is not None
    logged = engine_memory or {}
    tokens, blocks, block_size, fits = _capacity(cache_info, sequence_tokens,
                                                 data_parallel_size)
    per_device_kv = cache_label(cache_info, "kv_cache_memory_bytes")
    if per_device_kv is None:
        per_device_kv = logged.get("kv_cache_bytes")
    total, free, margin = _device_figures(sampler)
    return Headroom(
        weights_bytes=weights_bytes(model_dir) if model_dir is not None else None,
        kv_cache_dtype=cache_info.get("cache_dtype", "?"),
        kv_cache_tokens=tokens,
        kv_cache_blocks=blocks,
        block_size=block_size,
        kv_cache_memory_bytes=_times(per_device_kv, devices),
        sequence_tokens=sequence_tokens,
        max_concurrent_sequences=fits,
        peak_engine_rss_bytes=sampler.peak_rss if local else None,
        peak_gpu_memory_bytes=_peak_gpu(sampler),
        peak_kv_cache_usage=sampler.peak_kv,  # unrounded: a tiny model uses a sliver
        preemptions=preemptions,
        devices=devices,
        data_parallel_size=data_parallel_size,
        weights_loaded_bytes=_times(logged.get("weights_bytes"), devices),
        device_memory_total_bytes=total,
        device_memory_free_bytes=free,
        device_margin=margin,
    )
