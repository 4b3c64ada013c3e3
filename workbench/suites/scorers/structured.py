"""Structured output: does the response parse, satisfy the item's JSON Schema, and carry the
expected arguments?

Schema validation is jsonschema's (Draft 2020-12). Argument matching is written here: the
expected values come as BFCL's lists of acceptable values per parameter, where "" means
"may be left out", and no library scores that format outside BFCL's own harness.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

__all__ = ["extract_json", "score_json"]

_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)


def extract_json(response: str) -> tuple[bool, Any]:
    """(parsed, value): the whole response as JSON, allowing surrounding whitespace and one
    Markdown code fence (what a client that strips fences would accept), nothing more."""
    text = response.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None


def _same(got: Any, want: Any) -> bool:
    """Equal as a function argument: numbers by value, strings ignoring case and
    surrounding space, containers element by element."""
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return float(got) == float(want)
    if isinstance(want, str) and isinstance(got, str):
        return got.strip().lower() == want.strip().lower()
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    return False


def _field_correct(args: dict, name: str, acceptable: list) -> bool:
    if name not in args:
        return "" in acceptable  # optional, and left out
    return any(_same(args[name], ok) for ok in acceptable if ok != "")


def score_json(response: str, schema: dict, expected: dict[str, list]) -> tuple[float, dict]:
    """(score, checks): score 1 when every expected argument is right and nothing unknown is
    added; checks holds parses, schema_valid and fields_correct (share of fields right)."""
    parsed, value = extract_json(response)
    valid = parsed and not any(jsonschema.Draft202012Validator(schema).iter_errors(value))
    if not (parsed and isinstance(value, dict)):
        return 0.0, {"parses": float(parsed), "schema_valid": float(valid),
                     "fields_correct": 0.0}
    right = sum(_field_correct(value, name, ok) for name, ok in expected.items())
    unknown = set(value) - set(expected)
    fields = right / len(expected) if expected else float(not value)
    exact = right == len(expected) and not unknown
    return float(exact), {"parses": float(parsed), "schema_valid": float(valid),
                          "fields_correct": round(fields, 6)}
