"""Content digests: the identities that caches are keyed by."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from workbench.mechanisms.paths import cache_root

__all__ = ["folder_digest", "model_file_digests", "sha256_json"]

# The files besides the weights that decide what a model is asked and how it answers: the
# tokenizer, its chat template and the generation defaults vLLM reads (docs/gates.md,
# "Only the candidate differs").
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt",
                   "special_tokens_map.json", "added_tokens.json")


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


def _text_digest(text: str | None) -> str:
    return hashlib.sha256(text.encode()).hexdigest() if text else "none"


def model_file_digests(folder: Path) -> dict[str, str]:
    """sha256 of a model folder's chat template, its tokenizer (the template left out, so a
    template change is named as such) and its generation_config.json; "none" for what the
    folder lacks."""
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    template = config.pop("chat_template", None)
    for name in ("chat_template.jinja", "chat_template.json"):
        if (folder / name).is_file():
            template = (folder / name).read_text()
    tokenizer = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    for name in TOKENIZER_FILES:
        if (folder / name).is_file():
            tokenizer.update(name.encode() + b"\0")
            _hash_file(folder / name, tokenizer)
    generation = folder / "generation_config.json"
    return {"chat_template": _text_digest(template if isinstance(template, str)
                                          else json.dumps(template, sort_keys=True)
                                          if template else None),
            "tokenizer": tokenizer.hexdigest(),
            "generation_config": sha256_json(json.loads(generation.read_text()))
            if generation.is_file() else "none"}
