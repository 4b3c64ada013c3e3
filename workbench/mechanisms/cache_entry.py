"""Cache entries that are checked before they are trusted.

Every entry (a quantised artifact, a baseline's measurement folder with its items and
log-probabilities) is sealed when stored: a digest list of its files, written last. Before
reuse the list is checked file by file; an entry that fails (a file cut short, missing or
changed, or no list at all) is named, dropped and rebuilt, never served. Entries are
stored through a staging folder unique to the process and renamed into place, so two
processes storing the same entry cannot mix their files, and staging folders left by a
killed process are swept by the next one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from workbench.mechanisms.digests import sha256_json
from workbench.mechanisms.paths import cache_root
from workbench.mechanisms.processes import pid_alive

__all__ = ["SEAL", "check", "seal", "staging_for", "store", "store_together", "sweep_staging"]

SEAL = ".workbench-digests.json"
STAGING = ".partial-"  # <entry>.partial-<pid>-<random>


def _file_sha256(path: Path) -> str:
    """sha256 of a file, remembered against its size and modification time, so checking an
    unchanged multi-gigabyte artifact costs a stat per file; any change hashes again."""
    st = path.stat()
    memo = cache_root() / "digests" / "files" / (
        sha256_json([str(path.resolve()), st.st_size, st.st_mtime_ns]) + ".txt")
    if memo.is_file():
        return memo.read_text().strip()
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    memo.parent.mkdir(parents=True, exist_ok=True)
    memo.write_text(digest)
    return digest


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != SEAL)


def seal(folder: Path) -> None:
    """Write the entry's digest list (the last file written: an entry without it is
    incomplete)."""
    listing = {str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": _file_sha256(p)}
               for p in _files(folder)}
    (folder / SEAL).write_text(json.dumps(listing, indent=1, sort_keys=True))


def check(folder: Path) -> str | None:
    """Why the entry cannot be trusted, or None when every listed file is as sealed."""
    listing_file = folder / SEAL
    if not listing_file.is_file():
        return f"{folder}: no digest list ({SEAL}): incomplete, or stored by an older workbench"
    try:
        listing = json.loads(listing_file.read_text(encoding="utf-8"))
        assert isinstance(listing, dict)
    except (ValueError, AssertionError):
        return f"{listing_file}: unreadable digest list"
    for name, expected in sorted(listing.items()):
        path = folder / name
        if not path.is_file():
            return f"{path}: missing"
        if path.stat().st_size != expected.get("size"):
            return f"{path}: {path.stat().st_size} bytes, sealed with {expected.get('size')}"
        if _file_sha256(path) != expected.get("sha256"):
            return f"{path}: content differs from its sealed digest"
    return None


def staging_for(final: Path) -> Path:
    """A staging folder beside ``final``, unique to this process and call."""
    return final.with_name(f"{final.name}{STAGING}{os.getpid()}-{uuid.uuid4().hex[:8]}")


def store(src: Path, final: Path) -> None:
    """Copy a finished folder into the cache as ``final``, sealed, atomically."""
    _store(final, lambda staging: shutil.copytree(src, staging))


def store_together(parts: dict[str, Path], final: Path) -> None:
    """Several finished folders as one entry (``final/<name>`` each), sealed together: a
    reader finds all of them or none (a baseline and a candidate measured together)."""
    def copy(staging: Path) -> None:
        staging.mkdir(parents=True)
        for name, src in parts.items():
            shutil.copytree(src, staging / name)

    _store(final, copy)


def _store(final: Path, fill: Callable[[Path], object]) -> None:
    staging = staging_for(final)
    try:
        fill(staging)
        seal(staging)
        publish(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def publish(staging: Path, final: Path) -> None:
    """Rename a sealed staging folder into place. When another process got there first
    with a sound entry, that one stays and ours is dropped; a broken one is replaced."""
    if final.exists():
        if check(final) is None:
            shutil.rmtree(staging, ignore_errors=True)
            return
        shutil.rmtree(final, ignore_errors=True)
    try:
        staging.rename(final)
    except OSError:  # lost a race to a process that published between the two steps
        shutil.rmtree(staging, ignore_errors=True)


def _staging_pid(path: Path) -> int | None:
    tail = path.name.rsplit(STAGING, 1)[-1]
    head = tail.split("-", 1)[0]
    return int(head) if head.isdigit() and int(head) < 1 << 22 else None  # not a timestamp


def sweep_staging(parent: Path, older_than_s: float = 3600) -> list[Path]:
    """Remove staging folders whose process is gone (or, without a pid, that are old)."""
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    for path in parent.glob(f"*{STAGING}*"):
        pid = _staging_pid(path)
        gone = not pid_alive(pid) if pid is not None else \
            time.time() - path.stat().st_mtime > older_than_s
        if gone:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
