"""The device as nvidia-smi, NVML and torch see it, and the workbench's own GPU helpers
(workbench/mechanisms/gpu.py) run against the real thing: the `probe` part of the GPU
check (scripts/gpu_check.sh).

    python scripts/gpu_probe.py OUT MODE        # MODE: gpu | dry-run

Raw outputs land in OUT/probe/ (nvidia-smi -L, -q, the CSV queries), to be kept as
recorded outputs for tests. Where there is no nvidia-smi or NVML (the dry run on a CPU)
that is recorded as absent, not a failure; on a GPU machine their absence fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from gpu_summary import check, part_record, write_part  # noqa: E402

__all__ = ["nvidia_smi", "nvml_recording", "q_excerpt", "torch_facts", "workbench_gpus"]

QUERIES = {
    "query-gpu.csv": ["--query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,"
                      "compute_cap,mig.mode.current,driver_version", "--format=csv"],
    "query-compute-apps.csv": ["--query-compute-apps=pid,gpu_uuid,used_memory",
                               "--format=csv"],
}
Q_KEYS = ("Driver Version", "CUDA Version", "Product Name", "Product Architecture",
          "Persistence Mode", "Current", "Compute Mode", "Total", "Used", "Free", "Bus Id")


def q_excerpt(text: str) -> list[str]:
    """The lines of `nvidia-smi -q` that identify the device and its memory."""
    return [line.strip() for line in text.splitlines()
            if line.strip().split(":")[0].strip() in Q_KEYS]


def nvidia_smi(folder: Path) -> dict[str, Any]:
    """nvidia-smi's answers, saved raw; {"absent": ...} without it."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"absent": "nvidia-smi not on PATH"}
    facts: dict[str, Any] = {}
    runs = {"L.txt": ["-L"], "q.txt": ["-q"], **QUERIES}
    for name, args in runs.items():
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
        (folder / f"nvidia-smi-{name}").write_text(proc.stdout + proc.stderr)
        facts[name] = proc.returncode
    lines = (folder / "nvidia-smi-L.txt").read_text().splitlines()
    facts["gpus"] = [line for line in lines if line.startswith("GPU ")]
    facts["mig_devices"] = [line.strip() for line in lines if line.strip().startswith("MIG ")]
    facts["q_excerpt"] = q_excerpt((folder / "nvidia-smi-q.txt").read_text())
    return facts


def _device(nv: Any, h: Any) -> dict[str, Any]:
    mem = nv.nvmlDeviceGetMemoryInfo(h)
    return {"uuid": str(nv.nvmlDeviceGetUUID(h)), "name": str(nv.nvmlDeviceGetName(h)),
            "compute_capability": list(nv.nvmlDeviceGetCudaComputeCapability(h)),
            "memory": {"total": int(mem.total), "free": int(mem.free), "used": int(mem.used)},
            "processes": [{"pid": int(p.pid), "usedGpuMemory": p.usedGpuMemory,
                           "gpuInstanceId": getattr(p, "gpuInstanceId", None),
                           "computeInstanceId": getattr(p, "computeInstanceId", None)}
                          for p in nv.nvmlDeviceGetComputeRunningProcesses(h)]}


def _with_mig(nv: Any, h: Any, record: dict[str, Any]) -> dict[str, Any]:
    """A GPU's MIG mode and, when enabled, each MIG device in its slot."""
    try:
        record["mig_mode"] = list(nv.nvmlDeviceGetMigMode(h))
    except nv.NVMLError:
        return record  # not supported: no "mig_mode", as the recordings have it
    if record["mig_mode"][0] != nv.NVML_DEVICE_MIG_ENABLE:
        return record
    record["max_mig_devices"] = slots = int(nv.nvmlDeviceGetMaxMigDeviceCount(h))
    record["mig_devices"] = []
    for slot in range(slots):
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, slot)
        except nv.NVMLError:
            continue  # an empty slot
        record["mig_devices"].append({"slot": slot, **_device(nv, mig)})
    return record


def nvml_recording() -> dict[str, Any]:
    """What NVML answers, in the form of the recordings the unit tests replay
    (tests/data/nvml/*.json, served by fake_pynvml.py), so that this machine's answers
    can replace the hand-written ones; {"absent": ...} without NVML."""
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception as err:  # noqa: BLE001 - ImportError, NVMLError, OSError: all "absent"
        return {"absent": f"{type(err).__name__}: {err}"}
    try:
        devices = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            record = {"pci_bus_id": str(nv.nvmlDeviceGetPciInfo(h).busId), **_device(nv, h)}
            devices.append(_with_mig(nv, h, record))
        return {"driver_version": str(nv.nvmlSystemGetDriverVersion()),
                "cuda_driver_version": int(nv.nvmlSystemGetCudaDriverVersion()),
                "devices": devices}
    finally:
        nv.nvmlShutdown()


def torch_facts() -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {
        "torch": torch.__version__, "cuda_build": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER")}
    if facts["cuda_available"]:
        facts["devices"] = [{"name": torch.cuda.get_device_name(i),
                             "capability": list(torch.cuda.get_device_capability(i)),
                             "memory_total": torch.cuda.get_device_properties(i).total_memory}
                            for i in range(torch.cuda.device_count())]
        facts["bf16"] = torch.cuda.is_bf16_supported()
    return facts


def workbench_gpus(cuda: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """visible_gpus() and process_memory_bytes() as the workbench calls them, checked
    against torch: the same devices, and at least the memory torch holds in this
    process (1 GiB allocated for the purpose)."""
    try:
        from workbench.mechanisms import gpu
    except Exception as err:  # noqa: BLE001 - not written yet, or an import it lacks
        return {"workbench_gpu": f"not available ({type(err).__name__}: {err})"}, []
    import torch

    host = gpu.visible_gpus()
    facts: dict[str, Any] = {"visible_gpus": host.to_dict() if host else None}
    if not cuda:
        return facts, [check("visible_gpus() is None without a GPU", host is None, facts)]
    block = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    held = gpu.process_memory_bytes({os.getpid()}, host) if host else 0
    facts.update(process_memory_bytes=held, torch_reserved=torch.cuda.memory_reserved(),
                 device_free_bytes=gpu.device_free_bytes(host) if host else None)
    del block
    ours = [(g.name, g.compute_capability) for g in host.gpus] if host else []
    theirs = [(torch.cuda.get_device_name(i), "{}.{}".format(*torch.cuda.get_device_capability(i)))
              for i in range(torch.cuda.device_count())]
    return facts, [
        check("visible_gpus() names torch's devices (name, capability)", ours == theirs,
              {"workbench": ours, "torch": theirs}),
        check("process_memory_bytes(this pid) >= torch's reserved memory",
              held >= facts["torch_reserved"],
              f"{held} >= {facts['torch_reserved']} (0: NVML's PIDs are not this "
              "container's)")]


def probe(out: Path, mode: str) -> dict[str, Any]:
    started = time.perf_counter()
    folder = out / "probe"
    folder.mkdir(parents=True, exist_ok=True)
    smi, nv, tf = nvidia_smi(folder), nvml_recording(), torch_facts()
    if "absent" not in nv:
        (folder / "nvml-recording.json").write_text(json.dumps(
            {"description": f"recorded by scripts/gpu_check.sh on {os.uname().nodename}, "
                            f"{time.strftime('%Y-%m-%d')}, before this process first "
                            "touched CUDA", **nv}, indent=2))
    wb, checks = workbench_gpus(tf["cuda_available"])
    if mode == "gpu":
        checks += [check("torch.cuda.is_available()", tf["cuda_available"], tf.get("devices")),
                   check("nvidia-smi answers", "absent" not in smi, smi.get("gpus")),
                   check("NVML answers", "absent" not in nv, nv.get("absent"))]
    else:  # the dry run: the CPU stands in, and the GPU's tools are absent, not failing
        checks.append(check("no CUDA device (dry run)", not tf["cuda_available"], None))
    figures = {"nvidia_smi": smi, "nvml": nv, "torch": tf, "workbench": wb}
    (folder / "probe.json").write_text(json.dumps(figures, indent=2, default=str))
    record = part_record("probe", None, time.perf_counter() - started, checks=checks,
                         figures={"nvidia_smi": smi.get("absent") or smi.get("gpus"),
                                  "nvml": nv.get("absent") or {
                                      "driver": nv["driver_version"],
                                      "devices": [d["name"] for d in nv["devices"]]},
                                  "torch": {k: tf.get(k) for k in ("torch", "cuda_build",
                                                                   "devices")},
                                  "workbench": wb})
    write_part(out, record)
    return record


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in ("gpu", "dry-run"):
        print("usage: gpu_probe.py OUT gpu|dry-run", file=sys.stderr)
        sys.exit(2)
    sys.path.insert(0, str(REPO))
    result = probe(Path(sys.argv[1]), sys.argv[2])
    sys.exit(0 if result["status"] == "ran" else 1)
