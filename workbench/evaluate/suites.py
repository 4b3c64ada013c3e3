"""Evaluation suites: a folder with a YAML spec, a JSONL data file, SOURCE and LICENSE.

See eval_suites/README.md for the format. Loading validates everything and reports every
problem with its file (and line, for data) at once.
"""

from __future__ import annotations

import hashlib
import json
import random
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config import format_validation_error, read_yaml
from ..errors import InputError
from ..jsonl import jsonl_lines
from ..paths import REPO_ROOT

__all__ = ["SUITES_ROOT", "Suite", "SuiteItem", "SuiteSpec", "find_suite_dir", "load_suite"]

SUITES_ROOT = REPO_ROOT / "eval_suites"
SUITE_KINDS = ("quality", "fidelity")


class SampleSizes(BaseModel):
    model_config = ConfigDict(extra="forbid")
    smoke: int | None = Field(default=None, gt=0, description="Items in the smoke profile")
    full: int | None = Field(default=None, gt=0, description="Items in the full profile (all)")


class SuiteSpec(BaseModel):
    """The suite's YAML file."""

    model_config = ConfigDict(extra="forbid")
    name: str
    version: str
    kind: Literal["quality", "fidelity"]
    description: str = ""
    data: str = "items.jsonl"
    system_prompt: str | None = None
    prompt_template: str = Field(description="Python format string over the item's fields")
    scoring: Literal["numeric", "exact", "choice", "code", "logprobs"] = "numeric"
    answer_field: str = "answer"
    choices_field: str = Field(
        default="choices", description="choice: the item field listing each continuation "
                                       "scored after the prompt; the answer is its index")
    max_tokens: int = Field(default=32, gt=0)
    check_field: str = Field(
        default="check", description="code: the item field holding the test program run "
                                     "after the prompt and the completion")
    stop: list[str] = Field(default_factory=list, max_length=4,
                            description="code: stop sequences for the raw completion (the "
                                        "OpenAI API, and vLLM's, take at most 4)")
    timeout_s: float = Field(default=10.0, gt=0, description="code: time limit per program")
    top_k: int = Field(default=20, ge=1, le=20,
                       description="fidelity: prompt log-probabilities kept per position "
                                   "(vLLM allows at most 20 by default)")
    max_prompt_tokens: int = Field(default=256, ge=8,
                                   description="fidelity: texts are cut to this many tokens")
    sample: SampleSizes = SampleSizes()

    def model_post_init(self, _ctx: object) -> None:
        if (self.kind == "fidelity") != (self.scoring == "logprobs"):
            raise ValueError("kind 'fidelity' goes with scoring 'logprobs', and only it")
        if self.scoring in ("choice", "code") and self.system_prompt:
            raise ValueError(f"scoring '{self.scoring}' continues raw text: no system_prompt")

    @property
    def needs_answer(self) -> bool:
        return self.scoring not in ("logprobs", "code")


@dataclass(frozen=True)
class SuiteItem:
    id: str
    prompt: str
    answer: str
    slices: tuple[str, ...]
    choices: tuple[str, ...] = ()  # scoring 'choice': the continuations, answer = index
    check: str = ""  # scoring 'code': the test program appended to prompt + completion


@dataclass(frozen=True)
class Suite:
    spec: SuiteSpec
    path: Path
    items: tuple[SuiteItem, ...]
    digest: str  # sha256 of the spec and data bytes: the suite's identity in caches

    @property
    def name(self) -> str:
        return self.spec.name

    def sample(self, profile: str, seed: int) -> tuple[SuiteItem, ...]:
        """The items a profile runs: a seeded, order-stable subset, or all."""
        size = getattr(self.spec.sample, profile)
        if size is None or size >= len(self.items):
            return self.items
        chosen = set(random.Random(seed).sample(range(len(self.items)), size))
        return tuple(it for i, it in enumerate(self.items) if i in chosen)


def find_suite_dir(name: str) -> Path:
    """A suite by folder path, or by name under eval_suites/<kind>/."""
    direct = Path(name)
    if (direct / "suite.yaml").is_file():
        return direct.resolve()
    for kind in SUITE_KINDS:
        candidate = SUITES_ROOT / kind / name
        if (candidate / "suite.yaml").is_file():
            return candidate
    known = sorted(p.parent.name for p in SUITES_ROOT.glob("*/*/suite.yaml"))
    raise InputError(f"suite {name!r} not found; shipped suites: {', '.join(known)}")


def _template_fields(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f}


def _choices(spec: SuiteSpec, row: dict, where: str, problems: list[str]
             ) -> tuple[str, ...] | None:
    """The continuations of a multiple-choice item; None (and a problem) when malformed."""
    if spec.scoring != "choice":
        return ()
    choices, answer = row[spec.choices_field], row[spec.answer_field]
    if not (isinstance(choices, list) and len(choices) >= 2
            and all(isinstance(c, str) and c for c in choices)):
        problems.append(f"{where}: '{spec.choices_field}' must list two or more strings")
        return None
    if not (isinstance(answer, int) and 0 <= answer < len(choices)):
        problems.append(f"{where}: '{spec.answer_field}' must be the index of the right "
                        f"choice (0-{len(choices) - 1}), got {answer!r}")
        return None
    return tuple(choices)


def _parse_items(spec: SuiteSpec, data_path: Path, problems: list[str]) -> list[SuiteItem]:
    needed = _template_fields(spec.prompt_template) | {"id"}
    if spec.needs_answer:
        needed.add(spec.answer_field)
    if spec.scoring == "choice":
        needed.add(spec.choices_field)
    if spec.scoring == "code":
        needed.add(spec.check_field)
    items: list[SuiteItem] = []
    seen: set[str] = set()
    for lineno, line in enumerate(jsonl_lines(data_path), start=1):
        if not line.strip():
            continue
        where = f"{data_path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"{where}: not valid JSON ({err.msg})")
            continue
        missing = sorted(needed - row.keys()) if isinstance(row, dict) else sorted(needed)
        if missing:
            problems.append(f"{where}: missing field(s) {', '.join(missing)}")
            continue
        item_id = str(row["id"])
        if item_id in seen:
            problems.append(f"{where}: duplicate id {item_id!r}")
            continue
        seen.add(item_id)
        slices = row.get("slices", [])
        if not isinstance(slices, list) or not all(isinstance(s, str) for s in slices):
            problems.append(f"{where}: 'slices' must be a list of strings")
            continue
        choices = _choices(spec, row, where, problems)
        if choices is None:
            continue
        items.append(
            SuiteItem(
                id=item_id,
                prompt=spec.prompt_template.format(**row),
                answer=str(row.get(spec.answer_field, "")),
                slices=tuple(slices),
                choices=choices,
                check=str(row.get(spec.check_field, "")) if spec.scoring == "code" else "",
            )
        )
    return items


def load_suite(name: str) -> Suite:
    """Load and validate a suite; raise InputError listing every problem."""
    folder = find_suite_dir(name)
    spec_path = folder / "suite.yaml"
    raw = read_yaml(spec_path)
    try:
        spec = SuiteSpec.model_validate(raw if isinstance(raw, dict) else {})
    except ValidationError as err:
        problems = format_validation_error(spec_path, err, SuiteSpec)
        raise InputError(problems[0], problems) from None
    problems = [
        f"{folder}: missing {needed} file (every shipped suite names its source and licence)"
        for needed in ("SOURCE.md", "LICENSE")
        if not (folder / needed).is_file()
    ]
    data_path = folder / spec.data
    items: list[SuiteItem] = []
    if not data_path.is_file():
        problems.append(f"{spec_path}: data: file {spec.data!r} not found in {folder}")
    else:
        items = _parse_items(spec, data_path, problems)
        if not items and not problems:
            problems.append(f"{data_path}: no items")
    if problems:
        raise InputError(problems[0], problems)
    digest = hashlib.sha256(spec_path.read_bytes() + data_path.read_bytes()).hexdigest()
    return Suite(spec=spec, path=folder, items=tuple(items), digest=digest)
