"""Content digests: the identities that caches are keyed by."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from workbench.mechanisms.paths import cache_root

__all__ = ["folder_digest", "sha256_json"]


def sha256_json(obj: Any) -> str:
    """Digest of a JSON-serialisable value, independent of key order."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _hash_file(path: Path, h: Any) -> None:
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


def folder_digest(folder: Path) -> str:
    """sha256 over every file's relative name and bytes.

    Hashing a large model takes a while, so the result is memoised against each file's
    size and modification time; any change to either hashes again.
    """
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    signature = sha256_json([[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in files])
    memo = cache_root() / "digests" / f"{signature}.txt"
    if memo.is_file():
        return memo.read_text().strip()
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(folder)).encode() + b"\0")
        _hash_file(p, h)
    digest = h.hexdigest()
    memo.parent.mkdir(parents=True, exist_ok=True)
    memo.write_text(digest)
    return digest
