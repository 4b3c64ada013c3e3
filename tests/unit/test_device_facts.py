"""The device as a measurement depends on it (serve/device.py): the suites' batch follows the
engine's own on a GPU and stays at eight on a CPU, batch-invariant kernels are asked of vLLM
where it has them, and the GPU type is in the baseline's cache key, the comparability gate,
the record and MLflow's params. vLLM's rules are read from vLLM's own code where it runs here
(its batch defaults, its environment parsing)."""

from __future__ import annotations

import os

import pytest

from workbench.config.run_config import EngineConfig
from workbench.gate.comparability import comparability
from workbench.mechanisms.gpu import Gpu, GpuHost
from workbench.record.render import device_text
from workbench.serve import device as device_mod
from workbench.serve.device import (
    CPU_IN_FLIGHT,
    batch_invariant_reason,
    batch_limits,
    default_max_num_seqs,
    device_facts,
    suite_in_flight,
)
from workbench.serve.engine import ServerInfo
from workbench.serve.engine_log import scheduler_flags
from workbench.tracking.run_log import device_params

GiB = 1024**3


def host(name: str, memory_gib: float, capability: str, count: int = 1,
         mig: str | None = None) -> GpuHost:
    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", name=name, memory_total_bytes=int(memory_gib * GiB),
                     compute_capability=capability, mig_profile=mig) for i in range(count))
    return GpuHost(gpus=gpus, driver_version="580.95.05", cuda_driver_version="13.0")


H200 = host("NVIDIA H200", 139.8, "9.0")
H100 = host("NVIDIA H100 80GB HBM3", 79.6, "9.0")
A100 = host("NVIDIA A100-SXM4-80GB", 79.3, "8.0")
L4 = host("NVIDIA L4", 22.5, "8.9")
T4 = host("Tesla T4", 15.0, "7.5")
B200 = host("NVIDIA B200", 179.0, "10.0")


class _Platform:
    """vLLM's current_platform as its CUDA platform answers get_batch_defaults' questions."""

    def __init__(self, gpus: GpuHost) -> None:
        self.gpu = gpus.gpus[0]

    def get_device_total_memory(self, device_id: int = 0) -> int:
        return self.gpu.memory_total_bytes

    def get_device_name(self, device_id: int = 0) -> str:
        return self.gpu.name

    def is_tpu(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return False


@pytest.mark.parametrize("gpus", [H200, H100, A100, L4, T4, B200], ids=lambda g: g.gpus[0].name)
def test_the_suites_batch_is_vllms_own_default_on_each_gpu(gpus: GpuHost, monkeypatch) -> None:
    """default_max_num_seqs mirrors EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py),
    asked here with vLLM's CUDA platform answers for each GPU."""
    arg_utils = pytest.importorskip("vllm.engine.arg_utils")
    from vllm.usage.usage_lib import UsageContext

    monkeypatch.setattr(arg_utils, "current_platform", _Platform(gpus))
    tokens, seqs = arg_utils.EngineArgs.get_batch_defaults(world_size=1)
    assert default_max_num_seqs("cuda", gpus) == seqs[UsageContext.OPENAI_API_SERVER]
    assert suite_in_flight("cuda", EngineConfig(), gpus) == seqs[UsageContext.OPENAI_API_SERVER]
    # the engine's batch as the record states it (issue 38): both of vLLM's limits
    assert batch_limits("cuda", EngineConfig(), gpus) == (
        seqs[UsageContext.OPENAI_API_SERVER], tokens[UsageContext.OPENAI_API_SERVER])


def test_the_engine_batch_on_this_cpu_is_vllms_own_and_a_configured_one_wins() -> None:
    """On the CPU platform vLLM runs on here, its own defaults for its OpenAI server, per
    rank; a limit in engine.extra_args is what the engine was told."""
    arg_utils = pytest.importorskip("vllm.engine.arg_utils")
    from vllm.usage.usage_lib import UsageContext

    for world in (1, 2):
        tokens, seqs = arg_utils.EngineArgs.get_batch_defaults(world_size=world)
        engine = EngineConfig(tensor_parallel_size=world)
        assert batch_limits("cpu", engine, None) == (seqs[UsageContext.OPENAI_API_SERVER],
                                                     tokens[UsageContext.OPENAI_API_SERVER])
    told = EngineConfig(extra_args=["--max-num-batched-tokens=4096", "--max-num-seqs", "32"])
    assert batch_limits("cpu", told, None) == (32, 4096)
    facts = device_facts("cpu", told)
    assert (facts.max_num_seqs, facts.max_num_batched_tokens) == (32, 4096)


def test_the_engine_log_states_chunked_prefill_and_prefix_caching() -> None:
    """vLLM's engine core logs its resolved config once at start on every platform
    (v1/engine/core.py: "Initializing a V1 LLM engine (v%s) with config: %s", the config's
    __str__ in config/vllm.py writing enable_prefix_caching=..., enable_chunked_prefill=...)."""
    line = ("(EngineCore pid=7) INFO 12-04 10:18:11 [core.py:133] Initializing a V1 LLM engine "
            "(v0.32.0) with config: model='/m', speculative_config=None, seed=0, "
            "enable_prefix_caching={}, enable_chunked_prefill={}, pooler_config=None")
    assert scheduler_flags(line.format(True, False)) == {"prefix_caching": True,
                                                         "chunked_prefill": False}
    assert scheduler_flags(line.format(False, True)) == {"prefix_caching": False,
                                                         "chunked_prefill": True}
    assert scheduler_flags("INFO started") == {}  # a log that does not say: not guessed


def test_the_suites_batch_follows_the_engine_and_stays_eight_on_a_cpu() -> None:
    engine = EngineConfig(extra_args=["--max-num-seqs", "64"])
    assert suite_in_flight("cuda", engine, H200) == 64  # what the engine was told
    assert suite_in_flight("cuda", EngineConfig(extra_args=["--max-num-seqs=48"]), H200) == 48
    assert suite_in_flight("cpu", engine, None) == CPU_IN_FLIGHT == 8
    assert device_facts("cpu", EngineConfig()).suite_in_flight == 8


@pytest.mark.parametrize(("gpus", "wanted", "on"), [
    (H200, "auto", True), (A100, "auto", True), (B200, "auto", True), (T4, "auto", False),
    (H200, "off", False), (None, "auto", False)])
def test_batch_invariant_kernels_where_vllm_has_them(gpus, wanted, on) -> None:
    got, why = batch_invariant_reason("cuda" if gpus else "cpu", gpus, wanted)
    assert got is on, why
    if gpus is T4:
        assert "7.5" in why and "8.0" in why


def test_the_engine_is_started_with_vllms_own_switch(monkeypatch, tmp_path) -> None:
    """The variable the engine gets is the one vLLM 0.32 reads (vllm/envs.py), and it reads
    it as on."""
    envs = pytest.importorskip("vllm.envs")
    from workbench.serve.engine import EngineServer

    monkeypatch.setattr(device_mod, "_probe", lambda: H200)
    model = tmp_path / "m"
    model.mkdir()
    server = EngineServer(model, "m", EngineConfig(), tmp_path / "log", device="cuda")
    assert server.info.device_facts["batch_invariant"] is True
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")  # the user's shell cannot turn it on
    cpu = EngineServer(model, "m", EngineConfig(), tmp_path / "log", device="cpu")
    for engine, on in ((server, True), (cpu, False)):
        monkeypatch.setattr(os, "environ", {**os.environ, **engine._env()})
        assert envs.environment_variables["VLLM_BATCH_INVARIANT"]() is on


def _info(device: str, facts: dict | None) -> ServerInfo:
    return ServerInfo(model_path="m", served_name="m", device=device, command=["python"],
                      cold_start_s=1.0, log_file="l", version="0.32.0",
                      model_files={k: "d" for k in ("chat_template", "tokenizer",
                                                    "generation_config")},
                      prefix_cache_at_start="empty", device_facts=facts or {})


def _facts(gpus: GpuHost | None, device: str = "cuda") -> dict:
    engine = EngineConfig()
    invariant, why = batch_invariant_reason(device, gpus, "auto")
    return {"kind": device, "gpus": gpus.to_dict() if gpus else None,
            "suite_in_flight": suite_in_flight(device, engine, gpus),
            "batch_invariant": invariant, "batch_invariant_why": why}


def test_a_baseline_from_another_gpu_type_is_not_comparable() -> None:
    _, gate = comparability(_info("cuda", _facts(A100)), _info("cuda", _facts(H100)), {}, {})
    assert gate.status == "fail"
    assert "A100" in gate.detail and "H100" in gate.detail
    _, same = comparability(_info("cuda", _facts(H100)), _info("cuda", _facts(H100)), {}, {})
    assert same.status == "pass", same.detail
    # a MIG slice is another device than the whole GPU
    mig = host("NVIDIA H200 MIG 3g.71gb", 70.0, "9.0", mig="3g.71gb")
    _, sliced = comparability(_info("cuda", _facts(H200)), _info("cuda", _facts(mig)), {}, {})
    assert sliced.status == "fail" and "3g.71gb" in sliced.detail


def test_a_measurement_made_before_device_facts_reads_as_the_cpu_run_it_was() -> None:
    """Older measurements (no device_facts) ran at eight in flight without batch-invariant
    kernels: re-judged, they still compare with each other and with a new CPU one."""
    old = _info("cpu", None)
    new = _info("cpu", _facts(None, "cpu"))
    _, gate = comparability(old, new, {}, {})
    assert gate.status == "pass", gate.detail


def test_the_gpu_is_named_in_the_record_and_in_mlflow() -> None:
    facts = device_mod.DeviceFacts(kind="cuda", gpus=H100.to_dict(), suite_in_flight=1024,
                                   batch_invariant=True, batch_invariant_why="on")
    params = device_params(facts)
    assert params["gpu"] == "1 x NVIDIA H100 80GB HBM3"
    assert params["gpu_compute_capability"] == "9.0" and params["cuda"] == "13.0"
    assert params["gpu_driver"] == "580.95.05" and params["suite_in_flight"] == 1024
    text = device_text({"kind": "cuda", "cpu": "x", "gpus": H100.to_dict()})
    assert "NVIDIA H100 80GB HBM3, compute capability 9.0" in text and "CUDA 13.0" in text
    assert device_params(device_facts("cpu", EngineConfig())) == {
        "suite_in_flight": 8, "batch_invariant": False, "serve_dtype": "bfloat16"}


def test_the_baseline_key_tells_gpu_types_apart_and_keeps_cpu_keys(monkeypatch) -> None:
    from workbench.config.run_config import RunConfig
    from workbench.measure.cache import baseline_key

    cfg = RunConfig.model_validate({"model": {"name": "m", "path": "m"},
                                    "candidates": {"c": {"recipe": "none"}},
                                    "calibration": {"files": ["c.jsonl"]},
                                    "engine": {"max_model_len": 8192},
                                    "suites": ["arithmetic"], "gates": "g.yaml"})
    keys = {}
    for gpus in (H100, A100, H200):
        monkeypatch.setattr(device_mod, "_probe", lambda gpus=gpus: gpus)
        keys[gpus.gpus[0].name] = baseline_key(cfg, "d", [], "cuda", "0.32.0", [])
    assert len(set(keys.values())) == 3
    cpu = baseline_key(cfg, "d", [], "cpu", "0.32.0", [])
    monkeypatch.setattr(device_mod, "_probe", lambda: None)
    assert baseline_key(cfg, "d", [], "cpu", "0.32.0", []) == cpu
    assert cpu not in keys.values()


def test_a_load_requests_shared_chunks_enter_the_baseline_key_only_where_it_has_some() -> None:
    from workbench.config.run_config import RunConfig
    from workbench.loadtest.workload import Request
    from workbench.measure.cache import baseline_key

    cfg = RunConfig.model_validate({"model": {"name": "m", "path": "m"},
                                    "candidates": {"c": {"recipe": "none"}},
                                    "calibration": {"files": ["c.jsonl"]},
                                    "engine": {"max_model_len": 8192},
                                    "suites": ["arithmetic"], "gates": "g.yaml"})
    plain = [Request(0.0, 40, 8)]
    shared = [Request(0.0, 40, 8, prefix_chunks=(0, 1))]
    key = baseline_key(cfg, "d", [], "cpu", "0.32.0", plain)
    assert key != baseline_key(cfg, "d", [], "cpu", "0.32.0", shared)
    # the fields a request had before traces carried chunks, so older baselines stay valid
    from workbench.measure import cache as measurement
    assert measurement._request_key(plain[0]) == {
        "arrival_s": 0.0, "prompt_tokens": 40, "output_tokens": 8, "conversation": -1,
        "think_s": 0.0}
