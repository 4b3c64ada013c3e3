"""Memory headroom of one served model: what the weights take, how much KV cache the engine
holds and how many sequences of the workload's length fit in it, and what the engine's
processes peaked at while serving.

Capacity figures come from the engine's own `vllm:cache_config_info`; peaks are sampled
while the suites and the load test run: the engine process group's resident memory from
/proc (CPU), device memory from nvidia-smi (GPU, NVML's numbers), and the engine's KV-cache
usage gauge.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from workbench.mechanisms.processes import group_pids

__all__ = ["Headroom", "PeakSampler", "group_rss_bytes", "headroom", "weights_bytes"]


@dataclass(frozen=True)
class Headroom:
    weights_bytes: int | None  # the checkpoint's tensors on disk; None: not here (endpoint)
    kv_cache_dtype: str
    kv_cache_tokens: int
    kv_cache_blocks: int
    block_size: int
    kv_cache_memory_bytes: int
    sequence_tokens: int  # the workload's prompt + output length
    max_concurrent_sequences: int  # whole sequences of that length the KV blocks hold
    # CPU: the engine process group's resident memory, sampled; None: no process here
    peak_engine_rss_bytes: int | None
    # GPU: memory in use on the engine's devices (nvidia-smi), sampled; 0 on CPU, None at
    # an endpoint
    peak_gpu_memory_bytes: int | None
    peak_kv_cache_usage: float  # the engine's vllm:kv_cache_usage_perc, highest sampled
    preemptions: int
    devices: int = 1  # devices the engine holds (tensor x pipeline x data parallel)
    data_parallel_size: int = 1  # replicas, each with its own KV cache

    def to_dict(self) -> dict:
        return asdict(self)


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


def gpu_memory_used_bytes() -> int:
    """Device memory in use on the GPUs this process may use (CUDA_VISIBLE_DEVICES, which a
    fanned-out sweep sets per candidate), from nvidia-smi (NVML); 0 without one."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    select = ["-i", visible] if visible else []
    out = subprocess.run([smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                          *select], capture_output=True, text=True)
    if out.returncode != 0:
        return 0
    return sum(int(x) for x in re.findall(r"\d+", out.stdout)) * 1024 * 1024


class PeakSampler:
    """Samples the engine's memory and KV-cache usage in a background thread."""

    def __init__(self, pgid: int | None, kv_usage: Callable[[], float],
                 interval_s: float = 0.25) -> None:
        """pgid: the engine's process group; None for an endpoint, whose processes and
        devices are not on this machine (only its KV usage gauge is sampled)."""
        self.pgid, self.kv_usage, self.interval_s = pgid, kv_usage, interval_s
        self.peak_rss = self.peak_gpu = 0
        self.peak_kv = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> None:
        if self.pgid is not None:
            self.peak_rss = max(self.peak_rss, group_rss_bytes(self.pgid))
            self.peak_gpu = max(self.peak_gpu, gpu_memory_used_bytes())
        try:
            self.peak_kv = max(self.peak_kv, float(self.kv_usage()))
        except Exception:  # noqa: BLE001 - a missed sample is not worth failing a run for
            pass

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def headroom(model_dir: Path | None, cache_info: dict[str, str], sequence_tokens: int,
             sampler: PeakSampler, preemptions: int, data_parallel_size: int = 1,
             devices: int = 1) -> Headroom:
    """model_dir None: the weights are not on this machine (an endpoint); nor are its
    processes (sampler.pgid None). With data parallelism every replica holds its own KV
    cache of the size the engine reports, so capacity counts each."""
    local = sampler.pgid is not None
    tokens = int(cache_info.get("kv_cache_size_tokens") or 0)
    blocks = int(cache_info.get("num_gpu_blocks") or 0)
    block_size = int(cache_info.get("block_size") or 0)
    # the engine allocates whole blocks: a sequence takes ceil(length / block size) of them
    per_sequence = -(-sequence_tokens // block_size) if block_size else 0
    fits = blocks // per_sequence if per_sequence else tokens // max(sequence_tokens, 1)
    return Headroom(
        weights_bytes=weights_bytes(model_dir) if model_dir is not None else None,
        kv_cache_dtype=cache_info.get("cache_dtype", "?"),
        kv_cache_tokens=tokens * data_parallel_size,
        kv_cache_blocks=blocks * data_parallel_size,
        block_size=block_size,
        kv_cache_memory_bytes=int(float(cache_info.get("kv_cache_memory_bytes") or 0))
        * data_parallel_size,
        sequence_tokens=sequence_tokens,
        max_concurrent_sequences=fits * data_parallel_size,
        peak_engine_rss_bytes=sampler.peak_rss if local else None,
        peak_gpu_memory_bytes=sampler.peak_gpu if local else None,
        peak_kv_cache_usage=sampler.peak_kv,  # unrounded: a tiny model uses a sliver
        preemptions=preemptions,
        devices=devices,
        data_parallel_size=data_parallel_size,
    )
