"""The published JSON Schema of decision.json, generated from the record's own types.

    python -m workbench.record.schema   # rewrite decision-v<N>.schema.json beside this file

pydantic derives it from the DecisionRecord dataclass (written here: only the
property `to_dict()` adds, exit_code, and the schema's identity). A unit test fails when
the committed file and the types disagree, and every record the tests produce is
validated against it with jsonschema.
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.mechanisms.json_schema import published_schema
from workbench.record.decision import SCHEMA_VERSION, DecisionRecord

__all__ = ["SCHEMA_FILE", "decision_schema", "schema_file", "validate_record"]


def schema_file(version: int = SCHEMA_VERSION) -> Path:
    """The published schema of a record version; older ones stay so that a stored record
    is checked against the schema it was written under (a stored record is a contract)."""
    return Path(__file__).with_name(f"decision-v{version}.schema.json")


SCHEMA_FILE = schema_file()


def decision_schema() -> dict:
    return published_schema(DecisionRecord, "decision", SCHEMA_VERSION, {
        0: "promote", 1: "reject or inconclusive (the CLI adds 2 bad input and 3 "
                         "infrastructure, which write no record)"})


def validate_record(record: dict) -> None:
    """Raise jsonschema.ValidationError when a decision.json breaks the published schema."""
    import jsonschema

    jsonschema.validate(record, json.loads(SCHEMA_FILE.read_text()))


if __name__ == "__main__":
    SCHEMA_FILE.write_text(json.dumps(decision_schema(), indent=2) + "\n")
    print(f"wrote {SCHEMA_FILE}")
