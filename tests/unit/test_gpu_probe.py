"""The GPU probe against recorded NVML answers (tests/data/nvml): two H100s with another
tenant on GPU 1, and a 3g.71gb MIG slice of an H200 (issue 35 items 6 and 12)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from workbench.mechanisms.gpu import (
    Gpu,
    GpuHost,
    device_free_bytes,
    device_total_bytes,
    process_memory_bytes,
    visible_gpus,
)

_spec = importlib.util.spec_from_file_location(
    "fake_pynvml", Path(__file__).parents[1] / "data" / "nvml" / "fake_pynvml.py")
assert _spec and _spec.loader
fake_pynvml = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_pynvml)

GPU0, GPU1 = "GPU-4a3b2c1d-5e6f-7a8b-9c0d-1e2f3a4b5c6d", "GPU-9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0"
MIG0 = "MIG-2b6c9f0e-7d41-5a8e-b3c2-d1e0f9a8b7c6"
H100_TOTAL, WORKER_BYTES = 85_520_809_984, 73_340_551_168
ENGINE = {4711, 4712, 4713, 4714}


def _nvml(monkeypatch: pytest.MonkeyPatch, recording: dict) -> ModuleType:
    module = fake_pynvml.build(recording)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def test_two_h100s_as_cuda_sees_them(monkeypatch: pytest.MonkeyPatch) -> None:
    recording = fake_pynvml.load("two_h100_other_tenant.json")
    recording["devices"].reverse()  # nothing rests on NVML's own order: PCI bus id decides
    nvml = _nvml(monkeypatch, recording)
    host = visible_gpus({})
    assert host == GpuHost(
        gpus=(Gpu(0, GPU0, "NVIDIA H100 80GB HBM3", H100_TOTAL, "9.0", None),
              Gpu(1, GPU1, "NVIDIA H100 80GB HBM3", H100_TOTAL, "9.0", None)),
        driver_version="570.124.06", cuda_driver_version="12.8", cuda_order_ambiguous=False)
    assert host.to_dict()["gpus"][1]["uuid"] == GPU1
    assert device_total_bytes(host) == 2 * H100_TOTAL
    assert nvml.state["open"] == 0  # every init shut down


@pytest.mark.parametrize(("visible", "uuids"), [
    ("1", [GPU1]),
    (f"{GPU1},{GPU0}", [GPU1, GPU0]),  # CUDA's index follows the list
    ("GPU-9f8e7d6c", [GPU1]),  # a unique UUID prefix, as CUDA takes it
    ("0,7,1", [GPU0]),  # CUDA stops at the first entry it cannot resolve
])
def test_cuda_visible_devices_picks_and_orders(monkeypatch: pytest.MonkeyPatch, visible: str,
                                               uuids: list[str]) -> None:
    _nvml(monkeypatch, fake_pynvml.load("two_h100_other_tenant.json"))
    host = visible_gpus({"CUDA_VISIBLE_DEVICES": visible})
    assert host is not None
    assert [(g.index, g.uuid) for g in host.gpus] == list(enumerate(uuids))


def test_no_gpu_when_cuda_hides_them_all_or_nvml_is_missing(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    _nvml(monkeypatch, fake_pynvml.load("two_h100_other_tenant.json"))
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    assert visible_gpus({}) is None
    broken = fake_pynvml.build(fake_pynvml.load("two_h100_other_tenant.json"))

    def no_library() -> None:
        raise broken.NVMLError(12)  # NVML_ERROR_LIBRARY_NOT_FOUND: no driver

    broken.nvmlInit = no_library
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    assert visible_gpus({}) is None
    host = GpuHost((Gpu(0, GPU0, "x", 1, "9.0", None),), "d", "c")
    assert process_memory_bytes(ENGINE, host) == 0 and device_free_bytes(host) is None


def test_mixed_models_make_cuda_indices_ambiguous(monkeypatch: pytest.MonkeyPatch) -> None:
    recording = fake_pynvml.load("two_h100_other_tenant.json")
    recording["devices"][1].update(name="NVIDIA A100-SXM4-80GB", compute_capability=[8, 0])
    _nvml(monkeypatch, recording)
    assert visible_gpus({}).cuda_order_ambiguous  # type: ignore[union-attr]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1"}).cuda_order_ambiguous  # type: ignore[union-attr]
    for env in ({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, {"CUDA_VISIBLE_DEVICES": GPU1}):
        host = visible_gpus(env)
        assert host is not None and not host.cuda_order_ambiguous, env
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": GPU1}).gpus[0].compute_capability == "8.0"  # type: ignore[union-attr]


def test_process_memory_is_the_engines_not_the_other_tenants(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    # nvidia-smi's memory.used (the old reading) adds every tenant's: 10.5 GB more here
    _nvml(monkeypatch, fake_pynvml.load("two_h100_other_tenant.json"))
    both = visible_gpus({})
    assert both is not None
    assert process_memory_bytes(ENGINE, both) == 2 * WORKER_BYTES
    assert process_memory_bytes({9001}, both) == 10_515_120_128
    assert device_free_bytes(both) == 11_651_776_512 + 1_136_656_384
    second = visible_gpus({"CUDA_VISIBLE_DEVICES": "1"})
    assert second is not None and process_memory_bytes(ENGINE, second) == WORKER_BYTES


def test_a_mig_slice_is_its_own_device(monkeypatch: pytest.MonkeyPatch) -> None:
    _nvml(monkeypatch, fake_pynvml.load("h200_mig_3g71gb.json"))
    slice0 = Gpu(0, MIG0, "NVIDIA H200 MIG 3g.71gb", 75_430_461_440, "9.0", "3g.71gb")
    assert visible_gpus({}).gpus == (slice0,)  # type: ignore[union-attr]  # CUDA's one MIG
    host = visible_gpus({"CUDA_VISIBLE_DEVICES": MIG0})
    assert host is not None and host.gpus == (slice0,)
    # its own memory and processes: not the H200's 141 GB, not the other slice's tenant
    assert process_memory_bytes({4711, 4712}, host) == 65_464_795_136
    assert device_free_bytes(host) == 9_512_681_472
    assert device_total_bytes(host) == 75_430_461_440
