"""The run folder as MLflow receives it. A suite that keeps no responses
(`store_responses: false`: a team's traffic, whose answers may quote its prompts) leaves its
answers in the run folder and the result cache on this machine, where re-judging a stored
run needs them; the copy logged holds, for each of its items, the answer's SHA-256 and
length instead (suites/results.without_answers), and none of its log-probability files."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from workbench.mechanisms.jsonl import jsonl_lines, write_jsonl
from workbench.suites.definition import Suite, load_suite
from workbench.suites.results import without_answers

__all__ = ["private_runs", "private_runs_named", "shareable"]


def private_runs(suites: list[Suite]) -> set[str]:
    """The result names of the suites that keep no responses."""
    return {name for s in suites if not s.spec.store_responses for name in s.spec.run_names()}


def private_runs_named(names: list[str]) -> set[str]:
    """The same for a stored run's config (`workbench log`): a suite that no longer loads
    is taken to keep none, by its folder's name, guided run included."""
    out: set[str] = set()
    for name in names:
        try:
            out |= private_runs([load_suite(name)])
        except Exception:  # noqa: BLE001 - not found or not valid now: err on the private side
            out |= {Path(name).name, f"{Path(name).name}-guided"}
    return out


def _result_name(file: Path, prefix: str) -> str:
    return file.name.removeprefix(prefix).removesuffix(".jsonl")


@contextmanager
def shareable(run_dir: Path, private: set[str]) -> Iterator[Path]:
    """The folder to log: the run folder itself where no suite run is private (`private`:
    their result names), else a temporary copy without their answers."""
    if not private:
        yield run_dir
        return
    with tempfile.TemporaryDirectory(prefix="wb-shared-") as tmp:
        copy = Path(tmp) / run_dir.name
        shutil.copytree(run_dir, copy, symlinks=True, ignore=lambda _d, names: [
            n for n in names if n.startswith("logprobs-")
            and _result_name(Path(n), "logprobs-") in private])
        for items in copy.rglob("items-*.jsonl"):
            if _result_name(items, "items-") in private:
                write_jsonl(items, [without_answers(json.loads(line))
                                    for line in jsonl_lines(items) if line.strip()])
        for measured in copy.rglob("measurement.json"):
            _hide_answers(measured, private)
        yield copy


def _hide_answers(measured: Path, private: set[str]) -> None:
    data = json.loads(measured.read_text())
    suites = data.get("suites") if isinstance(data, dict) else None
    if not isinstance(suites, dict) or not private & suites.keys():
        return
    for name in private & suites.keys():
        result = suites[name]
        result["items"] = [without_answers(i) for i in result.get("items", [])]
    measured.write_text(json.dumps(data, indent=2))
