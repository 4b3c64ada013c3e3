"""The GPUs this process may use, and what one process group holds on them, from NVML.

NVML comes from `nvidia-ml-py` (module `pynvml`; requirements/engine-cuda.txt), imported
where used: without it, without a driver, or when NVML fails, there is no GPU and every
function here says so (None, or 0) instead of raising. vLLM 0.32 does not depend on it: it
carries its own copy (vllm/third_party/pynvml.py, from nvidia-ml-py 12.570.86), which is
not imported here because importing it loads vLLM and torch (16 s on a 2-core CPU).

Which devices: CUDA's, not nvidia-smi's. CUDA_VISIBLE_DEVICES may name devices by index,
by UUID ("GPU-…") or by MIG UUID ("MIG-…"); the CUDA index of a device is its position in
that list. NVML enumerates physical GPUs by PCI bus id (sorted here again so nothing rests
on it); CUDA orders them fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, breaking ties
by PCI bus id. So where the GPUs are of one model the two orders agree, and where they
differ and CUDA_DEVICE_ORDER is not PCI_BUS_ID an index may name another device than
NVML's at that index: `GpuHost.cuda_order_ambiguous` says so (UUIDs are never ambiguous).

MIG: a MIG device is its own handle with its own memory (nvidia-smi's memory.used on a MIG
id reads 0); its profile ("3g.71gb") is the tail of its NVML name. CUDA enumerates a
single MIG device per process (NVIDIA's MIG user guide), so without CUDA_VISIBLE_DEVICES
only the first MIG device of a MIG-enabled GPU is listed.

Process memory is per process (NVML's running compute processes), so another tenant's
memory on the same device is not counted. NVML reports host PIDs: inside a container
without the host's PID namespace the engine's PIDs do not match and the figure is 0.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Gpu", "GpuHost", "Nvml", "device_free_bytes", "device_total_bytes",
           "lowest_capability", "nvml", "process_memory_bytes", "this_host", "visible_gpus"]


@dataclass(frozen=True)
class Gpu:
    index: int  # CUDA's index in this process
    uuid: str  # "GPU-…", or "MIG-…" for a MIG device
    name: str  # NVML's, e.g. "NVIDIA H100 80GB HBM3"; a MIG device's ends "MIG 3g.71gb"
    memory_total_bytes: int  # a MIG device's own
    compute_capability: str  # "9.0"
    mig_profile: str | None  # "3g.71gb"; None: a whole GPU


@dataclass(frozen=True)
class GpuHost:
    gpus: tuple[Gpu, ...]
    driver_version: str  # "570.124.06"
    cuda_driver_version: str  # the newest CUDA the driver supports, "12.8"
    # CUDA's index order may differ from NVML's (models differ, CUDA_DEVICE_ORDER unset)
    cuda_order_ambiguous: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Nvml:
    """Every NVML call this module makes, on the pynvml module it is given (tests give it
    a fake built from recorded answers)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        # NVMLLibraryMismatchError (an unversioned call the driver lacks) is no NVMLError
        self.errors: tuple[type[Exception], ...] = tuple(
            e for e in (getattr(lib, "NVMLError", None),
                        getattr(lib, "NVMLLibraryMismatchError", None)) if e is not None)

    def physical(self) -> list[Any]:
        """The physical GPUs, by PCI bus id (nvidia-smi's order)."""
        handles = [self.lib.nvmlDeviceGetHandleByIndex(i)
                   for i in range(self.lib.nvmlDeviceGetCount())]
        return sorted(handles, key=lambda h: str(self.lib.nvmlDeviceGetPciInfo(h).busId))

    def mig_devices(self, handle: Any) -> list[Any]:
        """A MIG-enabled GPU's MIG devices; [] when MIG is off or not supported."""
        try:
            if self.lib.nvmlDeviceGetMigMode(handle)[0] != self.lib.NVML_DEVICE_MIG_ENABLE:
                return []
            slots = self.lib.nvmlDeviceGetMaxMigDeviceCount(handle)
        except self.errors:
            return []
        found = []
        for i in range(slots):
            try:
                found.append(self.lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, i))
            except self.errors:
                continue  # an empty slot: NVML_ERROR_NOT_FOUND
        return found

    def by_uuid(self, uuid: str) -> Any:
        return self.lib.nvmlDeviceGetHandleByUUID(uuid)

    def uuid(self, handle: Any) -> str:
        return str(self.lib.nvmlDeviceGetUUID(handle))

    def name(self, handle: Any) -> str:
        return str(self.lib.nvmlDeviceGetName(handle))

    def memory(self, handle: Any) -> tuple[int, int]:
        """(total, free) bytes of a GPU, or of a MIG device alone."""
        info = self.lib.nvmlDeviceGetMemoryInfo(handle)
        return int(info.total), int(info.free)

    def capability(self, handle: Any) -> str:
        major, minor = self.lib.nvmlDeviceGetCudaComputeCapability(handle)
        return f"{major}.{minor}"

    def processes(self, handle: Any) -> list[tuple[int, int]]:
        """(pid, bytes) of each compute process; bytes 0 where NVML cannot tell (None)."""
        return [(int(p.pid), int(p.usedGpuMemory or 0))
                for p in self.lib.nvmlDeviceGetComputeRunningProcesses(handle)]

    def driver(self) -> tuple[str, str]:
        """The driver's version and the CUDA version it supports (12080 -> "12.8")."""
        cuda = int(self.lib.nvmlSystemGetCudaDriverVersion())
        return str(self.lib.nvmlSystemGetDriverVersion()), f"{cuda // 1000}.{cuda % 1000 // 10}"


@contextmanager
def nvml() -> Iterator[Nvml | None]:
    """NVML initialised for the block, or None where there is none. Holding it open around
    many calls (a sampler) saves an init per call; NVML counts nested inits."""
    try:
        import pynvml
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError, or OSError from a missing library
        yield None
        return
    try:
        yield Nvml(pynvml)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - already gone: nothing left to release
            pass


_MIG_PROFILE = re.compile(r"\bMIG (\S+)$")


def _gpu(nv: Nvml, index: int, handle: Any) -> Gpu:
    name = nv.name(handle)
    mig = _MIG_PROFILE.search(name)
    return Gpu(index=index, uuid=nv.uuid(handle), name=name,
               memory_total_bytes=nv.memory(handle)[0],
               compute_capability=nv.capability(handle),
               mig_profile=mig.group(1) if mig else None)


def _default_devices(nv: Nvml, physical: list[Any]) -> list[Any]:
    """What CUDA enumerates with no CUDA_VISIBLE_DEVICES: every GPU, a MIG-enabled one
    as its MIG devices (CUDA takes one MIG device per process: the first)."""
    found, mig_taken = [], False
    for handle in physical:
        migs = nv.mig_devices(handle)
        if not migs:
            found.append(handle)
        elif not mig_taken:
            found.append(migs[0])
            mig_taken = True
    return found


def _selected(nv: Nvml, physical: list[Any], visible: str) -> list[Any]:
    """The devices CUDA_VISIBLE_DEVICES names, in its order. CUDA ignores the list from
    the first entry it cannot resolve on, and so does this."""
    found: list[Any] = []
    uuids = [nv.uuid(h) for h in physical]
    for token in (t.strip() for t in visible.split(",")):
        if token.isdigit():
            if int(token) >= len(physical):
                break
            found.append(physical[int(token)])
            continue
        # CUDA takes a unique prefix of a GPU's UUID too
        matches = [h for h, u in zip(physical, uuids, strict=True) if u.startswith(token)]
        try:
            found.append(matches[0] if token.startswith("GPU-") and len(matches) == 1
                         else nv.by_uuid(token))
        except nv.errors:
            break
    return found


def _ambiguous(nv: Nvml, physical: list[Any], env: Mapping[str, str]) -> bool:
    by_index = env.get("CUDA_VISIBLE_DEVICES") is None or any(
        t.strip().isdigit() for t in env["CUDA_VISIBLE_DEVICES"].split(","))
    return (by_index and env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST") != "PCI_BUS_ID"
            and len({nv.name(h) for h in physical}) > 1)


def _host(nv: Nvml, env: Mapping[str, str]) -> GpuHost | None:
    physical = nv.physical()
    visible = env.get("CUDA_VISIBLE_DEVICES")
    handles = (_default_devices(nv, physical) if visible is None
               else _selected(nv, physical, visible))
    if not handles:
        return None  # none, or CUDA_VISIBLE_DEVICES="" hides them all
    driver, cuda = nv.driver()
    return GpuHost(tuple(_gpu(nv, i, h) for i, h in enumerate(handles)), driver, cuda,
                   _ambiguous(nv, physical, env))


def visible_gpus(env: Mapping[str, str] | None = None) -> GpuHost | None:
    """The GPUs CUDA would give this process (env: os.environ), or None: no GPU here."""
    with nvml() as nv:
        if nv is None:
            return None
        try:
            return _host(nv, os.environ if env is None else env)
        except nv.errors:
            return None


@functools.cache
def this_host() -> GpuHost | None:
    """visible_gpus() of this process, asked once: NVML's answer does not change while a
    run lasts, and the plan, the engine and the record all read it."""
    return visible_gpus()


def lowest_capability(gpus: GpuHost | None) -> tuple[int, int] | None:
    """The lowest compute capability among the visible GPUs (what an engine spanning them
    all can use), or None when none could be read."""
    found = [tuple(int(x) for x in g.compute_capability.split(".")[:2])
             for g in gpus.gpus if re.fullmatch(r"\d+\.\d+", g.compute_capability)] \
        if gpus else []
    return min((c[0], c[1]) for c in found) if found else None


def process_memory_bytes(pids: set[int], gpus: GpuHost) -> int:
    """Device memory these processes hold on the visible devices (the engine's process
    group), not any other tenant's; 0 without NVML. A MIG device answers for itself."""
    with nvml() as nv:
        if nv is None:
            return 0
        try:
            return sum(used for gpu in gpus.gpus
                       for pid, used in nv.processes(nv.by_uuid(gpu.uuid)) if pid in pids)
        except nv.errors:
            return 0


def device_free_bytes(gpus: GpuHost) -> int | None:
    """Free memory on the visible devices together, whoever holds the rest. None when
    NVML cannot answer: a lowest-free figure must not take a failed reading for a full
    device."""
    with nvml() as nv:
        if nv is None:
            return None
        try:
            return sum(nv.memory(nv.by_uuid(gpu.uuid))[1] for gpu in gpus.gpus)
        except nv.errors:
            return None


def device_total_bytes(gpus: GpuHost) -> int:
    """The visible devices' memory together (a MIG device's own, not its GPU's)."""
    return sum(gpu.memory_total_bytes for gpu in gpus.gpus)
