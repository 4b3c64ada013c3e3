"""Build bfcl-simple from the Berkeley Function-Calling Leaderboard data in `bfcl-eval`.

    pip download --no-deps bfcl-eval==2026.3.23 -d /tmp/bf
    unzip -q /tmp/bf/bfcl_eval-2026.3.23-py3-none-any.whl 'bfcl_eval/data/*' -d /tmp/bf/x
    python eval_suites/structured/build_bfcl.py /tmp/bf/x/bfcl_eval/data

One item per BFCL "simple" Python question (one function, one call): the function's
parameters become a JSON Schema (BFCL's Python-flavoured types mapped to JSON Schema's),
the expected arguments are BFCL's lists of acceptable values ("" = may be left out).
Items whose own expected values break the mapped schema are left out (counted on output).
"""

import json
import sys
from pathlib import Path

import jsonschema

from workbench.mechanisms.jsonl import write_jsonl

HERE = Path(__file__).parent / "bfcl-simple"
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array",
          "integer": "integer", "string": "string", "boolean": "boolean", "array": "array",
          "number": "number", "object": "object"}


def to_schema(p: dict) -> dict:
    """BFCL parameter description -> JSON Schema (types, enums, items, properties)."""
    out: dict = {}
    if p.get("type") in _TYPES:
        out["type"] = _TYPES[p["type"]]
    if "description" in p:
        out["description"] = p["description"]
    if "enum" in p:
        out["enum"] = p["enum"]
    if "items" in p:
        out["items"] = to_schema(p["items"])
    if "properties" in p:
        out["properties"] = {k: to_schema(v) for k, v in p["properties"].items()}
        out["required"] = list(p.get("required", []))
        out["additionalProperties"] = False
    return out


def slices(schema: dict) -> list[str]:
    """How many parameters, and whether any is an array or object."""
    props = schema["properties"].values()
    n = len(schema["properties"])
    shape = "nested" if any(v.get("type") in ("array", "object") for v in props) else "flat"
    return [f"params-{n}" if n < 3 else "params-3-or-more", shape]


def build(data: Path) -> tuple[list[dict], int]:
    questions = [json.loads(x) for x in (data / "BFCL_v4_simple_python.json").read_text()
                 .split("\n") if x.strip()]
    answers = {a["id"]: a for a in (json.loads(x) for x in
               (data / "possible_answer" / "BFCL_v4_simple_python.json").read_text()
               .split("\n") if x.strip())}
    out, dropped = [], 0
    for q in questions:
        (fn,) = q["function"]
        schema = to_schema(fn["parameters"])
        ((name, expected),) = answers[q["id"]]["ground_truth"][0].items()
        sample = {k: v[0] for k, v in expected.items() if v and v[0] != ""}
        if name != fn["name"] or any(jsonschema.Draft202012Validator(schema)
                                     .iter_errors(sample)):
            dropped += 1
            continue
        doc = {"name": fn["name"], "description": fn["description"], "parameters": schema}
        out.append({"id": q["id"], "question": q["question"][0][-1]["content"],
                    "function": json.dumps(doc, ensure_ascii=False),
                    "keys": ", ".join(schema["properties"]), "schema": schema,
                    "arguments": expected, "slices": slices(schema)})
    return out, dropped


if __name__ == "__main__":
    rows, dropped = build(Path(sys.argv[1]))
    write_jsonl(HERE / "items.jsonl", rows)
    print(f"bfcl-simple: {len(rows)} items ({dropped} left out: expected values break "
          f"their own schema)")
