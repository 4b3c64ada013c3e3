"""Files the workbench reads and writes, treated as untrusted: strict UTF-8, names that stay
names, and every written path inside the folder it belongs to.

A name read from a config (a candidate, a suite, a load profile, an experiment) becomes part
of a folder or file name, so it must never be able to act as a path: ``../../x`` or a
300-character name would write outside the run folder or fail deep inside a stage.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from workbench.mechanisms.errors import InfraError, InputError

__all__ = ["NAME_PATTERN", "NAME_RULE", "exists", "inside", "name_problem", "new_run_dir",
           "read_json", "read_text", "writable_problem", "write_json"]

# Letters, digits and . _ + - only, starting with a letter or digit, at most 64 characters:
# safe in a file name on every file system, in an MLflow run name and in a metric name.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
NAME_RULE = ("1-64 characters: letters, digits and . _ + -, starting with a letter or digit "
             "(a name, never a path)")


def exists(path: Path) -> bool:
    """Path.exists() that answers False where the OS refuses the name (too long, say),
    so that the reader of the config key that named it can say why."""
    try:
        return path.exists()
    except OSError:
        return False


def name_problem(value: object) -> str | None:
    """Why ``value`` cannot be a name, or None."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value) or ".." in value:
        return f"{value!r} is not a valid name: {NAME_RULE}"
    return None


def inside(root: Path, *parts: str) -> Path:
    """root/parts..., refused unless it resolves inside root: the one place where a written
    path is checked, whatever name went into it."""
    base = root.resolve()
    target = base.joinpath(*parts).resolve()
    if target != base and base not in target.parents:
        raise InputError(f"{'/'.join(parts)!r} would be written outside {root}; "
                         f"names must be {NAME_RULE}")
    return target


def read_text(path: Path) -> str:
    """The file as UTF-8 text; an unreadable or non-UTF-8 file is an InputError naming the
    file (and the byte offset of the first bad byte)."""
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, expected a file") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text (byte {err.start}: "
                         f"{data[err.start:err.start + 1]!r})") from None


def read_json(path: Path) -> Any:
    """A JSON file, strictly: unreadable, non-UTF-8 or invalid JSON names the file."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}, "
                         f"column {err.colno})") from None


def _nearest_existing(path: Path) -> Path:
    current = path.absolute()
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def writable_problem(path: Path, what: str, folder: bool) -> str | None:
    """Why the workbench could not write ``path`` (a folder it creates, or a file), checked
    before anything is written: an existing thing of the wrong kind, or no write permission
    where it would be created."""
    if path.exists():
        if folder and not path.is_dir():
            return f"{what} {path}: exists and is not a folder"
        if not folder and path.is_dir():
            return f"{what} {path}: is a folder, expected a file path"
        target = path if folder else path.parent
        if not os.access(target if target.is_dir() else path, os.W_OK):
            return f"{what} {path}: not writable"
        return None
    existing = _nearest_existing(path.parent)
    if not existing.is_dir():
        return f"{what} {path}: {existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{what} {path}: cannot create it ({existing} is not writable)"
    return None


def write_json(path: Path, data: object) -> None:
    """Write JSON atomically: a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def new_run_dir(root: Path, label: str) -> Path:
    """A new folder <time>-<label> under root, never one another run already holds (two
    runs started in the same second get -2, -3, ...), always inside root."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        run_dir = inside(root, f"{stamp}-{label}" + (f"-{n}" if n > 1 else ""))
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            continue
    raise InfraError(f"{root}: no free run folder name for {stamp}-{label}")
