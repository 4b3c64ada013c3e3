"""The exact texts a quantisation sees: calibration samples and held-out passages."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from workbench.config.run_config import CalibrationConfig
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.jsonl import jsonl_lines

__all__ = ["calibration_samples", "heldout_samples", "read_passages"]

Resolve = Callable[[str], Path]


def read_passages(names: list[str], resolve: Resolve, key: str) -> list[dict]:
    """Every JSON line of the files, each checked for a 'text' field."""
    rows: list[dict] = []
    for name in names:
        path = resolve(name)
        try:
            found = path.is_file()
        except OSError as err:  # e.g. a name longer than the filesystem allows
            raise InputError(
                f"calibration.{key}: {name!r} cannot be read: {err.strerror}") from None
        if not found:
            raise InputError(f"calibration.{key}: {name!r} not found (looked at {path})")
        for lineno, line in enumerate(_lines(path, key, name), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row.get("text"), str):
                    raise TypeError
            except (json.JSONDecodeError, TypeError, AttributeError):
                raise InputError(
                    f"{path}:{lineno}: expected a JSON object with a string 'text'"
                ) from None
            rows.append(row)
    return rows


def _lines(path: Path, key: str, name: str) -> list[str]:
    try:
        return list(jsonl_lines(path))
    except OSError as err:
        raise InputError(f"calibration.{key}: {name!r} cannot be read: {err.strerror}") from None


def calibration_samples(cfg: CalibrationConfig, resolve: Resolve) -> list[str]:
    """A seeded sample of the configured files' texts, in a fixed order."""
    texts = [r["text"] for r in read_passages(cfg.files, resolve, "files")]
    if len(texts) < cfg.num_samples:
        raise InputError(
            f"calibration.num_samples: {cfg.num_samples} asked for, but the files hold only "
            f"{len(texts)} samples"
        )
    return random.Random(cfg.seed).sample(texts, cfg.num_samples)


def heldout_samples(cfg: CalibrationConfig, resolve: Resolve) -> list[str]:
    """``heldout_samples`` passages drawn round-robin across domains (prose, code, each
    language...), so a small check still covers every kind of text; [] when disabled."""
    if cfg.heldout_samples == 0:
        return []
    by_domain: dict[str, list[str]] = defaultdict(list)
    for row in read_passages(cfg.heldout, resolve, "heldout"):
        by_domain[str(row.get("domain", "")).split(":")[0]].append(row["text"])
    rng = random.Random(cfg.seed)
    queues = [rng.sample(texts, len(texts)) for _, texts in sorted(by_domain.items())]
    picked: list[str] = []
    while len(picked) < cfg.heldout_samples and any(queues):
        for queue in queues:
            if queue and len(picked) < cfg.heldout_samples:
                picked.append(queue.pop())
    return picked
