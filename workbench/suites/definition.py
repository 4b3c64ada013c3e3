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

from pydantic import ValidationError

from workbench.mechanisms.errors import InputError
from workbench.mechanisms.jsonl import jsonl_lines
from workbench.mechanisms.paths import SHIPPED
from workbench.mechanisms.yaml_io import format_validation_error, read_yaml
from workbench.suites.lmeval import LmEvalTask, read_task
from workbench.suites.scorers.instructions import CHECKERS
from workbench.suites.spec import EXPECTATIONS, GENERATING, SUITE_KINDS, SuiteSpec
from workbench.suites.traffic import TrafficRequest, last_user_text, read_traffic, secret_kinds

__all__ = ["SUITES_ROOT", "Suite", "SuiteItem", "SuiteSpec", "find_suite_dir", "load_suite"]

SUITES_ROOT = SHIPPED / "eval_suites"


@dataclass(frozen=True)
class SuiteItem:
    id: str
    prompt: str
    answer: str
    slices: tuple[str, ...]
    choices: tuple[str, ...] = ()  # scoring 'choice': the continuations, answer = index
    check: str = ""  # 'code': the test program run after prompt + completion;
    #                  'instructions': the instructions to check, as JSON
    schema: str = ""  # 'json': the JSON Schema of the response, as JSON text
    # 'agreement' (a traffic suite): the request as sent, its own parameters and segments;
    # `prompt` then holds its last user turn, for the health checks, never written
    request: TrafficRequest | None = None


@dataclass(frozen=True)
class Suite:
    spec: SuiteSpec
    path: Path
    items: tuple[SuiteItem, ...]
    digest: str  # sha256 of the spec and data bytes: the suite's identity in caches
    lm_task: LmEvalTask | None = None  # scoring 'lm-eval': the task lm-eval runs

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def generates(self) -> bool:
        """Whether its items are generated text: the one definition that health checks,
        max_tokens in the record and a sweep's token budget all read."""
        if self.spec.scoring == "lm-eval":
            return self.lm_task is not None and self.lm_task.output_type == "generate_until"
        return self.spec.scoring in GENERATING

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
    """The item fields a prompt template names; ValueError for a template that cannot be
    filled from an item's fields (unbalanced braces, positional or indexed fields)."""
    fields = set()
    for _, field_name, _, _ in string.Formatter().parse(template):
        if field_name is None:
            continue
        if not field_name.isidentifier():
            raise ValueError(f"field {{{field_name}}} is not an item field name (use "
                             "{question}, {context}, ...; write {{ and }} for literal braces)")
        fields.add(field_name)
    return fields


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


def _is_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value == value  # not NaN
    try:
        return float(str(value)) == float(str(value))
    except ValueError:
        return False


def _answer_and_check(spec: SuiteSpec, row: dict, where: str, problems: list[str]
                      ) -> tuple[str, str, str] | None:
    """(answer, check, schema) as the scorer reads them; None (and a problem) if malformed.

    Structured values (expected arguments, schemas, instruction lists) are kept as JSON
    text so items stay hashable and comparable."""
    answer = row.get(spec.answer_field, "")
    check = row.get(spec.check_field, "")
    if spec.scoring == "numeric" and not _is_number(answer):
        problems.append(f"{where}: '{spec.answer_field}' must be a number (numeric scoring), "
                        f"got {answer!r}")
        return None
    if spec.scoring == "exact" and not isinstance(answer, (str, int, float)):
        problems.append(f"{where}: '{spec.answer_field}' must be a string (exact scoring), "
                        f"got {answer!r}")
        return None
    if spec.scoring == "refusal" and answer not in EXPECTATIONS:
        problems.append(f"{where}: '{spec.answer_field}' must be one of "
                        f"{', '.join(EXPECTATIONS)}, got {answer!r}")
        return None
    if spec.scoring == "json":
        schema = row[spec.schema_field]
        if not isinstance(schema, dict) or not isinstance(answer, dict):
            problems.append(f"{where}: '{spec.schema_field}' and '{spec.answer_field}' must be "
                            f"JSON objects (a schema, and the expected arguments)")
            return None
        return json.dumps(answer, sort_keys=True), "", json.dumps(schema, sort_keys=True)
    if spec.scoring == "instructions":
        if not (isinstance(check, list) and check
                and all(isinstance(c, dict) and "id" in c for c in check)):
            problems.append(f"{where}: '{spec.check_field}' must list instructions, "
                            f"each an object with an 'id'")
            return None
        unknown = sorted({c["id"] for c in check} - CHECKERS.keys())
        if unknown:
            problems.append(f"{where}: no checker for instruction(s) {', '.join(unknown)}; "
                            f"supported: {', '.join(sorted(CHECKERS))}")
            return None
        return "", json.dumps(check, sort_keys=True), ""
    return str(answer), str(check) if spec.scoring == "code" else "", ""


def _needed_fields(spec: SuiteSpec, template_fields: set[str]) -> set[str]:
    needed = template_fields | {"id"}
    if spec.needs_answer:
        needed.add(spec.answer_field)
    if spec.scoring == "choice":
        needed.add(spec.choices_field)
    if spec.scoring in ("code", "instructions"):
        needed.add(spec.check_field)
    if spec.scoring == "json":
        needed.add(spec.schema_field)
    return needed


def _read_rows(data_path: Path, problems: list[str]) -> list[tuple[str, dict]]:
    """(where, row) for every JSON object line; a line that is not one is a problem."""
    rows = []
    for lineno, line in enumerate(jsonl_lines(data_path), start=1):
        if not line.strip():
            continue
        where = f"{data_path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"{where}: not valid JSON ({err.msg})")
            continue
        if not isinstance(row, dict):
            problems.append(f"{where}: expected a JSON object")
            continue
        rows.append((where, row))
    return rows


def _parse_items(spec: SuiteSpec, spec_path: Path, data_path: Path, problems: list[str]
                 ) -> list[SuiteItem]:
    try:
        template_fields = _template_fields(spec.prompt_template)
    except ValueError as err:
        problems.append(f"{spec_path}: prompt_template: {err}")
        return []
    rows = _read_rows(data_path, problems)
    needed = _needed_fields(spec, template_fields)
    # A field that no item has is one mistake in the spec, not one per item.
    absent = sorted(f for f in needed if rows and not any(f in row for _, row in rows))
    if absent:
        keys = sorted({k for _, row in rows for k in row})
        named = ", ".join(absent)
        problems.append(f"{spec_path}: no item of {data_path.name} has the field(s) {named} "
                        f"that prompt_template or the scoring needs (items have: "
                        f"{', '.join(keys)})")
        return []
    items: list[SuiteItem] = []
    seen: set[str] = set()
    for where, row in rows:
        missing = sorted(needed - row.keys())
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
        scored = _answer_and_check(spec, row, where, problems)
        if choices is None or scored is None:
            continue
        answer, check, schema = scored
        items.append(SuiteItem(id=item_id, prompt=spec.prompt_template.format(**row),
                               answer=answer, slices=tuple(slices), choices=choices,
                               check=check, schema=schema))
    return items


def _traffic_items(data_path: Path, problems: list[str]) -> list[SuiteItem]:
    """A traffic file's requests as items: the segments (`key:label`) are the slices. An id
    or label holding a credential-shaped string is refused: those are written to records."""
    try:
        traffic = read_traffic(data_path)
    except InputError as err:
        problems.extend(err.problems)
        return []
    for r in traffic.requests:
        written = secret_kinds(json.dumps([r.id, r.segments], ensure_ascii=False))
        if written:
            problems.append(f"{data_path}: line {r.line}: id or segments: a credential-shaped "
                            f"string ({', '.join(written)}); ids and labels are written to "
                            "records, so they must not hold one")
    return [SuiteItem(id=r.id, prompt=last_user_text(r), answer="",
                      slices=tuple(f"{k}:{v}" for k, v in r.segments.items()), request=r)
            for r in traffic.requests]


MAX_PROBLEMS_SHOWN = 10


def _capped(problems: list[str]) -> list[str]:
    """At most MAX_PROBLEMS_SHOWN lines per suite: the rest is counted, not printed."""
    if len(problems) <= MAX_PROBLEMS_SHOWN:
        return problems
    more = len(problems) - MAX_PROBLEMS_SHOWN
    return problems[:MAX_PROBLEMS_SHOWN] + [f"... and {more} more problem(s) like these"]


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
    lm_task = read_task(folder, spec.task, problems) if spec.task else None
    data_path = lm_task.data_file if lm_task else folder / spec.data
    items: list[SuiteItem] = []
    if spec.task and lm_task is None:
        pass  # the task's own problem is reported
    elif not data_path.is_file():
        problems.append(f"{spec_path}: data: file {spec.data!r} not found in {folder}")
    elif spec.kind == "traffic":
        items = _traffic_items(data_path, problems)
    else:
        items = _parse_items(spec, spec_path, data_path, problems)
        if not items and not problems:
            problems.append(f"{data_path}: no items")
    if problems:
        problems = _capped(problems)
        raise InputError(problems[0], problems)
    task_bytes = lm_task.yaml_path.read_bytes() if lm_task else b""
    digest = hashlib.sha256(spec_path.read_bytes() + task_bytes + data_path.read_bytes()
                            ).hexdigest()
    return Suite(spec=spec, path=folder, items=tuple(items), digest=digest, lm_task=lm_task)


