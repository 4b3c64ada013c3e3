"""The wheels the GPU check carries: their size checked where they are downloaded, and
installed offline where they are used (scripts/gpu_check.sh).

    python3 scripts/gpu_wheels.py size DIR LIMIT_MIB
    python  scripts/gpu_wheels.py install WHEELS TARGET OUT

`size` fails (exit 1) when DIR holds more than LIMIT_MIB: the GPU machine takes at most
64 MiB of files besides the git working tree. `install` puts into TARGET (a folder the
check then puts first on PYTHONPATH) every carried wheel whose exact version the running
Python lacks and whose tags it supports, then imports what the quantise stage needs in a
fresh process; it writes the `environment` part of the record. A wheel is a zip laid out
as site-packages (PEP 427), so it is unpacked rather than handed to pip: the machine has
no package index, and nothing here may reach one.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_summary import check, part_record, write_part  # noqa: E402

__all__ = ["IMPORTS", "Wheel", "installed_versions", "normalise", "parse_wheel", "select",
           "size_guard", "unpack"]

MIB = 2**20
MARKER = ".gpu-check-site"  # only a folder carrying this is ever emptied
# What the quantize worker and the checkpoint reload import (worker: llmcompressor,
# datasets; transformers: compressed_tensors for a quantised checkpoint).
IMPORTS = ("llmcompressor", "compressed_tensors", "datasets", "loguru", "pydantic")
_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<tags>[^-]+-[^-]+-[^-]+)"
                    r"\.whl$")


def normalise(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


class Wheel:
    def __init__(self, path: Path, name: str, version: str, tags: str) -> None:
        self.path, self.name, self.version, self.tags = path, normalise(name), version, tags

    def __repr__(self) -> str:
        return f"{self.name}=={self.version}"


def parse_wheel(path: Path) -> Wheel:
    found = _WHEEL.match(path.name)
    if not found:
        raise ValueError(f"{path.name}: not a wheel file name (name-version-py-abi-platform.whl)")
    return Wheel(path, found["name"], found["version"], found["tags"])


def size_guard(folder: Path, limit_mib: float) -> tuple[bool, int]:
    """(within the limit, total bytes) of every file under folder."""
    total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return total <= limit_mib * MIB, total


def installed_versions() -> dict[str, str]:
    return {normalise(d.metadata["Name"]): d.version
            for d in importlib.metadata.distributions() if d.metadata["Name"]}


def _supported(tags: str) -> bool:
    from packaging.tags import parse_tag, sys_tags

    return bool(parse_tag(tags) & set(sys_tags()))


def select(wheels: list[Wheel], installed: dict[str, str],
           supported: Callable[[str], bool] = _supported) -> dict[str, list[Wheel]]:
    """Which wheels to unpack: those whose version is not installed and whose tags this
    Python takes; the others, present already or unusable here, are left."""
    out: dict[str, list[Wheel]] = {"install": [], "present": [], "unusable": []}
    for wheel in wheels:
        if installed.get(wheel.name) == wheel.version:
            out["present"].append(wheel)
        elif supported(wheel.tags):
            out["install"].append(wheel)
        else:
            out["unusable"].append(wheel)
    return out


def unpack(wheel: Path, target: Path) -> None:
    """The wheel's files into target as pip --target lays them out: <name>.data/purelib
    and platlib merged into the root (scripts and headers are not needed here)."""
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(target)
    for data in target.glob("*.data"):
        for lib in ("purelib", "platlib"):
            if (data / lib).is_dir():
                shutil.copytree(data / lib, target, dirs_exist_ok=True)
        shutil.rmtree(data)


def _fresh(target: Path) -> None:
    if target.exists():
        if not (target / MARKER).exists() and any(target.iterdir()):
            raise SystemExit(f"{target}: exists and was not made by the GPU check; "
                             "give GPU_CHECK_SITE an empty or new folder")
        shutil.rmtree(target)
    target.mkdir(parents=True)
    (target / MARKER).touch()


def _import_check(target: Path) -> tuple[bool, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(target), os.environ.get("PYTHONPATH", "")) if p)}
    code = ("import importlib.metadata as m, sys\n"
            f"for n in {IMPORTS!r}: __import__(n)\n"
            "print(' '.join(f'{d}=={m.version(d)}' for d in "
            "('llmcompressor', 'compressed-tensors', 'transformers', 'torch')))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    if proc.returncode == 0:
        return True, proc.stdout.strip().splitlines()[-1]  # after any library's log lines
    return False, (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]


def install(wheels_dir: Path, target: Path, out: Path) -> dict[str, Any]:
    started = time.perf_counter()
    wheels = [parse_wheel(p) for p in sorted(wheels_dir.glob("*.whl"))] \
        if wheels_dir.is_dir() else []
    chosen = select(wheels, installed_versions())
    _fresh(target)
    for wheel in chosen["install"]:
        unpack(wheel.path, target)
    ok, versions = _import_check(target)
    figures = {"python": sys.version.split()[0], "target": str(target),
               "wheels_carried": len(wheels) if wheels else f"none ({wheels_dir} absent)",
               **{k: [repr(w) for w in v] for k, v in chosen.items()}, "versions": versions}
    checks = [check(f"import {', '.join(IMPORTS)}", ok, versions)]
    record = part_record("environment", None, time.perf_counter() - started,
                         checks=checks, figures=figures)
    write_part(out, record)
    return record


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "size":
        ok, total = size_guard(Path(argv[1]), float(argv[2]))
        print(f"{total / MIB:.1f} MiB in {argv[1]} (limit {argv[2]} MiB)")
        if not ok:
            print(f"TOO LARGE: {argv[1]} holds {total / MIB:.1f} MiB, more than the "
                  f"{argv[2]} MiB the GPU machine takes", file=sys.stderr)
        return 0 if ok else 1
    if len(argv) == 4 and argv[0] == "install":
        record = install(Path(argv[1]), Path(argv[2]), Path(argv[3]))
        print(json.dumps(record["figures"], indent=1))
        return 0 if record["status"] == "ran" else 1
    print("usage: gpu_wheels.py size DIR LIMIT_MIB | install WHEELS TARGET OUT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
