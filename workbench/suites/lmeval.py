"""Quality suites defined by an lm-eval task YAML whose data is local.

A team that already has lm-eval tasks should not rewrite them: the suite folder holds the
task YAML and its data (JSONL, every row with an `id`), and suite.yaml says
`scoring: lm-eval`. lm-eval (its `local-completions` backend) does the prompting and
scoring against the served endpoint; the workbench maps each logged sample back to the
row's id and slices, so the results pair and gate like any other suite's.

lm-eval records no per-request latency, so these items carry latency 0; their prompt hash
is lm-eval's own doc hash (the same document hashes alike across runs).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from workbench.mechanisms.files import name_problem, read_text

__all__ = ["LmEvalTask", "read_task", "run_task"]


class _Function(str):
    """The target of an lm-eval `!function` tag, kept so it can be written back as one."""


class _TaskLoader(yaml.SafeLoader):
    """Reads lm-eval YAML, keeping its `!function` tags."""


class _TaskDumper(yaml.SafeDumper):
    """Writes lm-eval YAML, `!function` tags included."""


_TaskLoader.add_constructor("!function", lambda loader, node: _Function(node.value))
_TaskDumper.add_representer(
    _Function, lambda dumper, value: dumper.represent_scalar("!function", str(value)))


@dataclass(frozen=True)
class LmEvalTask:
    name: str
    yaml_path: Path
    data_file: Path  # the single local JSONL file the task reads
    split: str
    metric: str  # the first metric of metric_list: the item's score
    output_type: str


def read_task(folder: Path, task_file: str, problems: list[str]) -> LmEvalTask | None:
    """Check that the task YAML reads one local JSONL file; None (and problems) if not."""
    path = folder / task_file
    where = f"{path}"
    if not path.is_file():
        problems.append(f"{folder / 'suite.yaml'}: task: file {task_file!r} not found")
        return None
    try:
        doc = yaml.load(read_text(path), Loader=_TaskLoader)  # noqa: S506 (safe subclass)
    except yaml.YAMLError as err:
        problems.append(f"{where}: not valid YAML ({err})")
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("task"), str):
        problems.append(f"{where}: an lm-eval task YAML needs a 'task' name")
        return None
    if "include" in doc:
        problems.append(f"{where}: 'include' is not supported: put the whole task in one file")
        return None
    if doc.get("dataset_path") != "json":
        problems.append(f"{where}: dataset_path must be 'json' (local data), "
                        f"got {doc.get('dataset_path')!r}")
        return None
    split = doc.get("test_split") or doc.get("validation_split")
    files = (doc.get("dataset_kwargs") or {}).get("data_files")
    data = files.get(split) if isinstance(files, dict) and split else None
    if not isinstance(data, str):
        problems.append(f"{where}: dataset_kwargs.data_files must map the test_split "
                        f"({split!r}) to one JSONL file in the suite folder")
        return None
    if name_problem(data):
        problems.append(f"{where}: data file {data!r} must be a file name in the suite folder")
        return None
    if not (folder / data).is_file():
        problems.append(f"{where}: data file {data!r} not found in {folder}")
        return None
    metrics = doc.get("metric_list") or [{"metric": "acc"}]
    if not (isinstance(metrics, list) and isinstance(metrics[0], dict)
            and isinstance(metrics[0].get("metric"), str)):
        problems.append(f"{where}: metric_list must list objects with a 'metric' name")
        return None
    output_type = doc.get("output_type", "generate_until")
    return LmEvalTask(name=doc["task"], yaml_path=path, data_file=folder / data, split=str(split),
                      metric=str(metrics[0]["metric"]), output_type=output_type)


def _resolved_task_dir(task: LmEvalTask, into: Path) -> Path:
    """A copy of the task YAML whose data path is absolute: lm-eval resolves relative
    data_files against the working directory, not the YAML (docs/environments.md). The suite's
    Python files go beside it, since `!function` hooks resolve against the YAML's folder."""
    doc = yaml.load(read_text(task.yaml_path), Loader=_TaskLoader)  # noqa: S506
    doc["dataset_kwargs"]["data_files"] = {task.split: str(task.data_file.resolve())}
    (into / task.yaml_path.name).write_text(
        yaml.dump(doc, Dumper=_TaskDumper, sort_keys=False, allow_unicode=True))
    for module in task.yaml_path.parent.glob("*.py"):
        shutil.copy2(module, into / module.name)
    return into


def _adds_bos(tokenizer_dir: Path) -> bool:
    """Whether the model's own tokenizer starts a text with BOS: lm-eval must do the same,
    or its log-likelihoods differ from the engine's (docs/environments.md)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    return tok.bos_token_id is not None and tok("a").input_ids[:1] == [tok.bos_token_id]


def _softmax(logliks: list[float]) -> tuple[float, ...]:
    top = max(logliks)
    exps = [math.exp(x - top) for x in logliks]
    return tuple(round(e / sum(exps), 6) for e in exps)


@contextlib.contextmanager
def _output_into(log_file: Path) -> Iterator[None]:
    """lm-eval's progress bars, prints and log lines go to a file, not over the
    workbench's own progress display."""
    logger = logging.getLogger("lm_eval")
    saved = logger.handlers[:], logger.propagate
    with log_file.open("a") as out, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(out):
        logger.handlers, logger.propagate = [logging.StreamHandler(out)], False
        try:
            yield
        finally:
            logger.handlers, logger.propagate = saved


def run_task(task: LmEvalTask, base_url: str, model: str, tokenizer_dir: Path,
             indices: list[int], seed: int, concurrency: int, log_file: Path
             ) -> list[dict[str, Any]]:
    """Run the task on the given data rows; one dict per row: index, score, response,
    doc_hash, and choice_probs for multiple choice. lm-eval's own output goes to log_file."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # datasets phones home otherwise
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    with tempfile.TemporaryDirectory(prefix="workbench-lmeval-") as tmp, _output_into(log_file):
        manager = TaskManager(include_path=str(_resolved_task_dir(task, Path(tmp))))
        out = simple_evaluate(
            model="local-completions",
            model_args={"base_url": f"{base_url}/v1/completions", "model": model,
                        "tokenizer": str(tokenizer_dir), "tokenizer_backend": "huggingface",
                        "tokenized_requests": True, "num_concurrent": concurrency,
                        "add_bos_token": _adds_bos(tokenizer_dir), "seed": seed},
            tasks=[task.name], task_manager=manager, samples={task.name: indices},
            log_samples=True, random_seed=seed, numpy_random_seed=seed,
            torch_random_seed=seed, fewshot_random_seed=seed,
            gen_kwargs="temperature=0" if task.output_type == "generate_until" else None,
        )
    if out is None:
        raise RuntimeError(f"lm-eval returned no results for task {task.name}")
    logged = out["samples"][task.name]
    first_filter = logged[0]["filter"] if logged else "none"
    rows = []
    for s in (x for x in logged if x["filter"] == first_filter):
        resps = s["filtered_resps"]
        row = {"index": int(s["doc_id"]), "score": float(s[task.metric]),
               "doc_hash": s.get("doc_hash", ""), "choice_probs": ()}
        if task.output_type == "multiple_choice":
            logliks = [float(r[0]) for r in resps]
            row["choice_probs"] = _softmax(logliks)
            row["response"] = str(max(range(len(logliks)), key=logliks.__getitem__))
        else:
            row["response"] = json.dumps(resps[0] if len(resps) == 1 else resps, default=str)
        rows.append(row)
    return rows
