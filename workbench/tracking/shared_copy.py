"""The run folder as MLflow receives it. A suite that keeps no responses
(`store_responses: false`: a team's traffic, whose answers may quote its prompts) leaves its
answers in the run folder and the result cache on this machine, where re-judging a stored
run needs them; the copy logged holds, for each of its items, a keyed hash of the answer and
its length instead (suites/results.without_answers), and none of its log-probability files.

The key is this machine's own (ANSWER_KEY_FILE, made on first use): equal answers hash alike
across runs, and a short answer ("yes", a number) cannot be found again by hashing guesses.
The copy sits beside the run folder, its unchanged files hard links (no second copy of the
load test's raw files); a rewritten file replaces its link, never writes through it."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from workbench.mechanisms.files import write_json
from workbench.mechanisms.jsonl import jsonl_lines, write_jsonl
from workbench.mechanisms.paths import cache_root
from workbench.suites.definition import Suite, load_suite
from workbench.suites.results import without_answers

__all__ = ["PRIVATE_FILE", "answer_key", "private_runs", "shareable", "stored_private_runs"]

PRIVATE_FILE = "private-runs.json"  # in a run folder: its result names that keep no responses
ANSWER_KEY_FILE = "answer-hash.key"


def private_runs(suites: list[Suite]) -> set[str]:
    """The result names of the suites that keep no responses."""
    return {name for s in suites if not s.spec.store_responses for name in s.spec.run_names()}


def stored_private_runs(run_dir: Path, suite_names: list[str]) -> set[str]:
    """A stored run's private result names (`workbench log`): as evaluate wrote them in the
    run folder; for a run from before it did, the config's suites as they load now, one
    that does not load taken to keep none by its folder's name."""
    try:
        return set(json.loads((run_dir / PRIVATE_FILE).read_text()))
    except (OSError, ValueError):
        pass
    out: set[str] = set()
    for name in suite_names:
        try:
            out |= private_runs([load_suite(name)])
        except Exception:  # noqa: BLE001 - not found or not valid now: err on the private side
            out |= {Path(name).name, f"{Path(name).name}-guided"}
    return out


def answer_key() -> bytes:
    """This machine's key for hashing kept-back answers, made once (readable by its owner)."""
    path = cache_root() / ANSWER_KEY_FILE
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_bytes(32))
    return path.read_bytes()


def _result_name(file: Path, prefix: str) -> str:
    return file.name.removeprefix(prefix).removesuffix(".jsonl")


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)


@contextmanager
def shareable(run_dir: Path, private: set[str]) -> Iterator[Path]:
    """The folder to log: the run folder itself where no suite run is private (`private`:
    their result names), else a temporary copy without their answers."""
    if not private:
        yield run_dir
        return
    key = answer_key()
    with tempfile.TemporaryDirectory(prefix=f".{run_dir.name}.shared-",
                                     dir=run_dir.parent) as tmp:
        copy = Path(tmp) / run_dir.name
        shutil.copytree(run_dir, copy, copy_function=_link_or_copy, ignore=lambda _d, names: [
            n for n in names if n.endswith(".tmp")  # a write cut off (write_json)
            or (n.startswith("logprobs-") and _result_name(Path(n), "logprobs-") in private)])
        for items in copy.rglob("items-*.jsonl"):
            if _result_name(items, "items-") in private:
                rows = [_hidden(line, key) for line in jsonl_lines(items)]
                items.unlink()
                write_jsonl(items, [r for r in rows if r is not None])
        for measured in copy.rglob("measurement.json"):
            _hide_answers(measured, private, key)
        yield copy


def _hidden(line: str, key: bytes) -> dict | None:
    """A per-item line without its answers; None for a line that does not read (a run cut
    off mid-write), which is left out rather than logged as it is."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return without_answers(row, key) if isinstance(row, dict) else None


def _hide_answers(measured: Path, private: set[str], key: bytes) -> None:
    try:
        data = json.loads(measured.read_text())
    except (OSError, ValueError):
        measured.unlink()  # cut off mid-write: left out rather than logged as it is
        return
    suites = data.get("suites") if isinstance(data, dict) else None
    if not isinstance(suites, dict) or not private & suites.keys():
        return
    for name in private & suites.keys():
        result = suites[name]
        result["items"] = [without_answers(i, key) for i in result.get("items", [])]
    measured.unlink()
    write_json(measured, data)
