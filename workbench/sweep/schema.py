"""The published JSON Schema of sweep.json, generated from the sweep record's types.

    python -m workbench.sweep.schema   # rewrite sweep-v<N>.schema.json beside this file
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.mechanisms.json_schema import published_schema
from workbench.sweep.table import SWEEP_SCHEMA_VERSION, SweepRecord

__all__ = ["SCHEMA_FILE", "sweep_schema", "validate_sweep"]

SCHEMA_FILE = Path(__file__).with_name(f"sweep-v{SWEEP_SCHEMA_VERSION}.schema.json")


def sweep_schema() -> dict:
    return published_schema(SweepRecord, "sweep", SWEEP_SCHEMA_VERSION, {
        0: "a candidate is recommended", 1: "none was promoted",
        3: "a candidate's measurement failed (its row says why)"})


def validate_sweep(record: dict) -> None:
    """Raise jsonschema.ValidationError when a sweep.json breaks the published schema."""
    import jsonschema

    jsonschema.validate(record, json.loads(SCHEMA_FILE.read_text()))


if __name__ == "__main__":
    SCHEMA_FILE.write_text(json.dumps(sweep_schema(), indent=2) + "\n")
    print(f"wrote {SCHEMA_FILE}")
