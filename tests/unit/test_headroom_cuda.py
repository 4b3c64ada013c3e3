"""The headroom against what vLLM's CUDA path really reports (issue 35 items 1, 6, 8).

The cache_config_info labels are made by vLLM's own code: a CacheConfig as the CUDA
platform leaves it in the front end (vllm/config/cache.py, 0.32), the engines' ready
responses applied by the front end's own `MPClient._apply_ready_response`
(vllm/v1/engine/core_client.py: num_gpu_blocks summed over data-parallel engines,
kv_cache_size_tokens kept per engine), rendered by vLLM's own
`PrometheusStatLogger.log_metrics_info` (vllm/v1/metrics/loggers.py) and read back by the
workbench's scrape parser. GPU memory comes from recorded NVML answers (tests/data/nvml).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

from workbench.loadtest import headroom as hr
from workbench.loadtest.headroom import Headroom, PeakSampler, cache_label, headroom
from workbench.serve.engine_log import parse_cache_info

DATA = Path(__file__).parents[1] / "data"
_spec = importlib.util.spec_from_file_location("fake_pynvml", DATA / "nvml" / "fake_pynvml.py")
assert _spec and _spec.loader
fake_pynvml = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_pynvml)

# One engine's KV cache after profiling: an 8B model's on an H100 at
# gpu_memory_utilization 0.9 (16-token blocks).
ENGINE_BLOCKS, ENGINE_TOKENS = 27_000, 432_000


def _vllm() -> types.SimpleNamespace:
    pytest.importorskip("vllm", reason="vLLM's own CacheConfig and metrics logger are needed")
    import msgspec
    from prometheus_client import CollectorRegistry, Gauge, generate_latest
    from vllm.config import CacheConfig
    from vllm.v1.engine import EngineCoreReadyResponse
    from vllm.v1.engine.core_client import MPClient
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    return types.SimpleNamespace(
        msgspec=msgspec, CollectorRegistry=CollectorRegistry, Gauge=Gauge,
        generate_latest=generate_latest, CacheConfig=CacheConfig,
        EngineCoreReadyResponse=EngineCoreReadyResponse, MPClient=MPClient,
        PrometheusStatLogger=PrometheusStatLogger)


def _ready(v: types.SimpleNamespace, rank: int, dp: int) -> bytes:
    """What one engine core sends back (vllm/v1/engine/core.py builds it after profiling)."""
    return v.msgspec.msgpack.encode(v.EngineCoreReadyResponse(
        max_model_len=4096, num_gpu_blocks=ENGINE_BLOCKS, block_size=16,
        dp_stats_address=None, dtype="bfloat16", vllm_version="0.32.0", world_size=1,
        data_parallel_size=dp, tensor_parallel_size=1, pipeline_parallel_size=1,
        decode_context_parallel_size=1, data_parallel_rank=rank, max_num_seqs=256,
        max_num_batched_tokens=8192, instance_id="i", supports_lora=False, max_loras=0,
        kv_cache_size_tokens=ENGINE_TOKENS, kv_cache_max_concurrency=105.5))


def _scraped_labels(dp: int = 1, **cache_args: object) -> dict[str, str]:
    """The vllm:cache_config_info labels a CUDA front end with `dp` engines serves."""
    v = _vllm()
    cache = v.CacheConfig(**cache_args)  # the CUDA platform leaves kv_cache_memory_bytes None
    front = types.SimpleNamespace(
        vllm_config=types.SimpleNamespace(cache_config=cache,
                                          model_config=types.SimpleNamespace(max_model_len=4096)),
        _effective_attention_block_sizes=set(), stats_update_address=None,
        _kv_event_sources={})
    for rank in range(dp):
        v.MPClient._apply_ready_response(front, _ready(v, rank, dp))
    registry = v.CollectorRegistry()
    logger = types.SimpleNamespace(_gauge_cls=functools.partial(v.Gauge, registry=registry),
                                   engine_indexes=list(range(dp)))
    v.PrometheusStatLogger.log_metrics_info(logger, "cache_config", cache)
    return parse_cache_info(v.generate_latest(registry).decode())


def test_cuda_cache_config_info_reads_with_no_kv_memory_figure() -> None:
    # Before: float("None") raised ValueError after the suites and the load test had run.
    labels = _scraped_labels()
    assert labels["kv_cache_memory_bytes"] == "None"  # what vLLM really serves on CUDA
    room = headroom(None, labels, 1024, PeakSampler(None, lambda: 0.5), 0)
    assert room.kv_cache_memory_bytes is None  # absent, not 0 pretending to be measured
    assert (room.kv_cache_tokens, room.kv_cache_blocks, room.block_size) == (
        ENGINE_TOKENS, ENGINE_BLOCKS, 16)
    assert room.max_concurrent_sequences == ENGINE_BLOCKS // (1024 // 16)
    assert room.peak_gpu_memory_bytes is None and room.device_margin is None  # an endpoint
    assert cache_label(labels, "num_gpu_blocks_override") is None
    assert cache_label({}, "num_gpu_blocks") is None and cache_label({"x": ""}, "x") is None


def test_the_engine_reported_kv_pool_stands_in_for_the_missing_label() -> None:
    logged = {"weights_bytes": 16 * 2**30, "kv_cache_bytes": 58 * 2**30}  # per device
    room = headroom(None, _scraped_labels(), 1024, PeakSampler(None, lambda: 0.0), 0,
                    devices=2, engine_memory=logged)
    assert room.kv_cache_memory_bytes == 2 * 58 * 2**30
    assert room.weights_loaded_bytes == 2 * 16 * 2**30


def test_data_parallel_blocks_are_not_counted_twice() -> None:
    # --kv-cache-memory-bytes set, so the old code reached the capacity figures
    labels = _scraped_labels(dp=2, kv_cache_memory_bytes=40 * 2**30)
    # vLLM's front end summed the two engines' blocks and kept one engine's tokens
    assert labels["num_gpu_blocks"] == str(2 * ENGINE_BLOCKS)
    assert labels["kv_cache_size_tokens"] == str(ENGINE_TOKENS)
    room = headroom(None, labels, 1024, PeakSampler(None, lambda: 0.0), 0,
                    data_parallel_size=2, devices=2)
    assert room.kv_cache_blocks == 2 * ENGINE_BLOCKS  # before: 4 x
    assert room.kv_cache_tokens == 2 * ENGINE_TOKENS
    assert room.max_concurrent_sequences == 2 * (ENGINE_BLOCKS // 64)  # before: 4 x
    assert room.kv_cache_memory_bytes == 2 * 40 * 2**30  # per GPU, two GPUs


def test_cpu_figures_are_unchanged_and_no_gpu_fields_appear(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the CPU build has no NVML
    # vllm/platforms/cpu.py sets kv_cache_memory_bytes from VLLM_CPU_KVCACHE_SPACE
    labels = {"cache_dtype": "auto", "block_size": "128", "num_gpu_blocks": "728",
              "kv_cache_size_tokens": "93184", "kv_cache_memory_bytes": str(2**31)}
    sampler = PeakSampler(1, lambda: 0.25)
    monkeypatch.setattr(hr, "group_pids", lambda _pgid: [])
    sampler.sample()
    room = headroom(None, labels, 283, sampler, 0)
    stored = json.loads((DATA / "records" / "v4-default-int4" / "baseline" /
                         "measurement.json").read_text())["headroom"]
    for key in ("kv_cache_tokens", "kv_cache_blocks", "block_size", "kv_cache_memory_bytes",
                "max_concurrent_sequences", "peak_gpu_memory_bytes"):
        assert getattr(room, key) == stored[key], key  # what a CPU run recorded before
    assert (room.device_memory_total_bytes, room.device_memory_free_bytes,
            room.device_margin, room.weights_loaded_bytes) == (None, None, None, None)
    # a stored record's headroom (no GPU fields) still reads
    old = Headroom(**stored)
    assert old.device_margin is None and old.kv_cache_tokens == 93184


# labels the old code could read (--kv-cache-memory-bytes set): the GPU tests below fail on
# the old code for their memory figures, not for item 1's crash
_SET_KV = {"cache_dtype": "auto", "block_size": "16", "num_gpu_blocks": str(ENGINE_BLOCKS),
           "kv_cache_size_tokens": str(ENGINE_TOKENS), "kv_cache_memory_bytes": str(40 * 2**30)}


def _gpu_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, recording: dict,
              engine: list[int]) -> None:
    """NVML answering from `recording`; nvidia-smi (the old reader) answering from it too."""
    module = fake_pynvml.build(recording)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    path = tmp_path / "recording.json"
    path.write_text(json.dumps(recording))
    fake_pynvml.write_fake_smi(path, tmp_path / "bin", sys.executable)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{__import__('os').environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(hr, "group_pids", lambda _pgid: engine)


def test_gpu_memory_is_the_engines_own_and_the_margin_what_is_left(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    recording = fake_pynvml.load("two_h100_other_tenant.json")
    _gpu_host(monkeypatch, tmp_path, recording, [4711, 4712, 4713, 4714])
    sampler = PeakSampler(4711, lambda: 0.4)
    sampler.sample()
    recording["devices"][0]["memory"]["free"] -= 2**30  # the engine grew a little
    sampler.sample()
    room = headroom(None, _SET_KV, 1024, sampler, 0, devices=2)
    engine_only = 2 * 73_340_551_168  # not the other tenant's 10 GB on GPU 1
    assert room.peak_gpu_memory_bytes == engine_only  # before: nvidia-smi's sum of tenants
    assert room.device_memory_total_bytes == 2 * 85_520_809_984
    least_free = 11_651_776_512 - 2**30 + 1_136_656_384
    assert room.device_memory_free_bytes == least_free
    assert room.device_margin == round(least_free / (2 * 85_520_809_984), 4)


def test_gpu_memory_on_a_mig_slice_is_the_slices_own(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    recording = fake_pynvml.load("h200_mig_3g71gb.json")
    _gpu_host(monkeypatch, tmp_path, recording, [4711, 4712])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-2b6c9f0e-7d41-5a8e-b3c2-d1e0f9a8b7c6")
    with PeakSampler(4711, lambda: 0.1, interval_s=0.01) as sampler:
        sampler.sample()
    room = headroom(None, _SET_KV, 1024, sampler, 0)
    assert room.peak_gpu_memory_bytes == 65_464_795_136  # before: 0 (nvidia-smi on a MIG id)
    assert room.device_memory_total_bytes == 75_430_461_440  # the slice, not the H200
    assert room.device_memory_free_bytes == 9_512_681_472
    assert sys.modules["pynvml"].state["open"] == 0  # every NVML init was shut down


def test_gpu_memory_unknown_when_nvml_never_lists_the_engine(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # in a container without the host's PID namespace NVML's PIDs are not the engine's
    _gpu_host(monkeypatch, tmp_path, fake_pynvml.load("two_h100_other_tenant.json"), [31, 32])
    sampler = PeakSampler(31, lambda: 0.0)
    sampler.sample()
    room = headroom(None, _SET_KV, 1024, sampler, 0)
    assert room.peak_gpu_memory_bytes is None  # before: every tenant's memory on both GPUs
    assert room.device_margin is not None
