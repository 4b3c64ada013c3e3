"""A stand-in for nvidia-ml-py's `pynvml` module that answers from a recording
(tests/data/nvml/*.json): the same function names, argument shapes and return types as
pynvml 13.x (structures become objects with the same field names; strings are str, as
pynvml's convertStrBytes returns them; a missing MIG slot raises NVMLError(NOT_FOUND))."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_NOT_SUPPORTED = 3
NVML_DEVICE_MIG_ENABLE = 1


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class Handle:
    def __init__(self, record: dict, parent: Handle | None = None) -> None:
        self.record, self.parent = record, parent


def _ns(**fields: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(**fields)


def build(recording: Path | dict) -> types.ModuleType:
    """A module object to put in sys.modules["pynvml"]; `calls` counts inits."""
    data = json.loads(recording.read_text()) if isinstance(recording, Path) else recording
    physical = [Handle(d) for d in data["devices"]]
    migs = {h: [Handle(m, h) for m in h.record.get("mig_devices", [])] for h in physical}
    every = physical + [m for ms in migs.values() for m in ms]
    mod = types.ModuleType("pynvml")
    state = {"inits": 0, "open": 0}

    def init() -> None:
        state["inits"] += 1
        state["open"] += 1

    def shutdown() -> None:
        if state["open"] == 0:
            raise NVMLError(1)  # NVML_ERROR_UNINITIALIZED
        state["open"] -= 1

    def by_uuid(uuid: str) -> Handle:
        for h in every:
            if h.record["uuid"] == uuid:
                return h
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def mig_mode(h: Handle) -> list[int]:
        if h.parent is not None or "mig_mode" not in h.record:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return list(h.record["mig_mode"])

    def mig_by_index(h: Handle, index: int) -> Handle:
        found = [m for m in migs.get(h, []) if m.record["slot"] == index]
        if not found:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return found[0]

    def pci(h: Handle) -> types.SimpleNamespace:
        if h.parent is not None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return _ns(busId=h.record["pci_bus_id"])

    mod.__dict__.update(
        NVMLError=NVMLError, NVML_ERROR_NOT_FOUND=NVML_ERROR_NOT_FOUND,
        NVML_ERROR_NOT_SUPPORTED=NVML_ERROR_NOT_SUPPORTED,
        NVML_DEVICE_MIG_ENABLE=NVML_DEVICE_MIG_ENABLE, state=state,
        nvmlInit=init, nvmlShutdown=shutdown,
        nvmlSystemGetDriverVersion=lambda: data["driver_version"],
        nvmlSystemGetCudaDriverVersion=lambda: data["cuda_driver_version"],
        nvmlDeviceGetCount=lambda: len(physical),
        nvmlDeviceGetHandleByIndex=lambda i: physical[i],
        nvmlDeviceGetHandleByUUID=by_uuid,
        nvmlDeviceGetUUID=lambda h: h.record["uuid"],
        nvmlDeviceGetName=lambda h: h.record["name"],
        nvmlDeviceGetPciInfo=pci,
        nvmlDeviceGetMemoryInfo=lambda h: _ns(**h.record["memory"]),
        nvmlDeviceGetCudaComputeCapability=lambda h: tuple(h.record["compute_capability"]),
        nvmlDeviceGetMigMode=mig_mode,
        nvmlDeviceGetMaxMigDeviceCount=lambda h: h.record.get("max_mig_devices", 0),
        nvmlDeviceGetMigDeviceHandleByIndex=mig_by_index,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [_ns(**p) for p in h.record["processes"]],
    )
    return mod


def load(name: str) -> dict:
    return json.loads((Path(__file__).parent / name).read_text())


_SMI = '''#!{python}
"""nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits [-i IDS], answered
from a recording as nvidia-smi does: used MiB per physical GPU (every tenant's), and 0 for
a MIG id (issue 35 item 6)."""
import json, sys
data = json.load(open({recording!r}))
args = sys.argv[1:]
ids = args[args.index("-i") + 1].split(",") if "-i" in args else None
gpus = data["devices"]
for n, gpu in enumerate(gpus):
    if ids is None or str(n) in ids or gpu["uuid"] in ids:
        print(gpu["memory"]["used"] // 2**20)
for gpu in gpus:
    for mig in gpu.get("mig_devices", []):
        if ids is not None and mig["uuid"] in ids:
            print(0)
'''


def write_fake_smi(recording: Path, bin_dir: Path, python: str) -> Path:
    """An `nvidia-smi` on PATH that answers the old memory query from a recording."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(_SMI.format(python=python, recording=str(recording)))
    smi.chmod(0o755)
    return smi
