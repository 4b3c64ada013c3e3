"""Reading YAML strictly and saying what is wrong with it: UTF-8, no duplicate keys, every
problem an InputError naming the file (and line); pydantic's validation errors as one line
per problem naming the dotted key and what is allowed there. Config models derive from
StrictModel: an unknown key is an error, never silently ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
)

from workbench.mechanisms.errors import InputError
from workbench.mechanisms.files import name_problem, read_text

__all__ = ["StrictModel", "a_name", "format_validation_error", "named_keys", "read_yaml"]


class StrictModel(BaseModel):
    """A config section: unknown keys refused, values frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error: by
    default the last one silently wins, so a config would not mean what it reads as."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (lines {seen[key]} and {line})",
                    key_node.start_mark)
            if isinstance(key, (str, int, float, bool)):
                seen[key] = line
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file strictly (UTF-8, no duplicate keys), turning every problem into an
    InputError naming the file (and line)."""
    text = read_text(path)
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise InputError(f"{path}{where}: not valid YAML ({getattr(err, 'problem', err)})") from err


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation like X, X | None, list[X] or dict[str, X]."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names allowed at the parent of ``loc``, for 'unknown key' messages."""
    current: type[BaseModel] | None = model
    for part in loc[:-1]:
        if current is None:
            return []
        field = current.model_fields.get(str(part))
        if field is None:
            continue  # a dict key or list index inside a container field
        current = _model_in(field.annotation)
    if current is None:
        return []
    return [n for n, f in current.model_fields.items() if not f.exclude]


def format_validation_error(
    path: Path, err: ValidationError, model: type[BaseModel]
) -> list[str]:
    """One line per problem: file, dotted key, what is wrong and what is allowed."""
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        where = f"{path}: {key}:" if key else f"{path}:"  # a cross-field error names its fields
        if e["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed_keys(model, e["loc"]))
            lines.append(f"{where} unknown key (allowed here: {allowed})")
        elif e["type"] == "missing":
            lines.append(f"{where} required key is missing")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"{where} {msg}{_shown_input(e.get('input'))}")
    return lines


def _shown_input(value: Any) -> str:
    """' (got ...)' for a value short enough to read on one line; never a whole section."""
    if isinstance(value, (dict, list)):
        return ""
    text = repr(value)
    return f" (got {text})" if len(text) <= 80 else f" (got {text[:77]}...)"


def a_name(value: str) -> str:
    problem = name_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def named_keys(mapping: dict[str, Any]) -> dict[str, Any]:
    """A mapping whose keys become folder and file names (docs/reliability.md)."""
    for key in mapping:
        a_name(key)
    return mapping
