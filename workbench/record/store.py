"""Stored records and measurements read back, each checked against its published types
before any of it is used: a field that does not fit is an error naming the file and field.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import jsonschema
from pydantic import TypeAdapter, ValidationError

from workbench.gate.evidence import GateOutcome
from workbench.gate.looks import FIRST_LOOK_DIR
from workbench.measure.measurement import MEASUREMENT_FILE, Measurement
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.files import read_json
from workbench.record.decision import SCHEMA_VERSION, DecisionRecord
from workbench.record.migrate import FIRST_VERSION, migrate
from workbench.record.schema import SCHEMA_FILE, schema_file

__all__ = ["POLICY_FILE", "keep_first_look", "load_record", "stored_measurement"]

POLICY_FILE = "gates.yaml"  # the policy a run was judged under, copied into its folder
# what one look at the items leaves in a run folder: both sides' measurements, its record
_ONE_LOOK = ("baseline", "candidate", "decision.json", "decision.md")
_INPUTS = ("config.yaml", POLICY_FILE)


def keep_first_look(run_dir: Path) -> Path:
    """The first look's measurements and record moved into look-1/ before a second look
    measures into the run folder, with the inputs it was judged under copied beside them
    so that `workbench gate RUN/look-1` judges it again on its own."""
    folder = run_dir / FIRST_LOOK_DIR
    folder.mkdir()
    for name in _ONE_LOOK:
        if (run_dir / name).exists():
            (run_dir / name).rename(folder / name)
    for name in _INPUTS:
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, folder / name)
    return folder


def _field_path(loc: tuple) -> str:
    return ".".join(str(part) for part in loc) or "(the whole file)"


def load_record(run_dir: Path) -> DecisionRecord:
    """decision.json, checked against the published schema before any of it is used."""
    file = run_dir / "decision.json"
    if not file.is_file():
        raise InputError(f"{run_dir}: no decision.json (not a finished run folder)")
    data = read_json(file)
    version = data.get("schema_version") if isinstance(data, dict) else None
    published = schema_file(version) if isinstance(version, int) else SCHEMA_FILE
    if not published.is_file():
        published = SCHEMA_FILE  # an unknown version: judged by the current schema
    schema = json.loads(published.read_text())
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        raise InputError(f"{file}: {_field_path(tuple(error.absolute_path))}: "
                         f"{error.message[:200]} (not a record this workbench wrote: "
                         f"{published.name})")
    if isinstance(version, int) and not FIRST_VERSION <= version <= SCHEMA_VERSION:
        raise InputError(f"{file}: schema_version {version}: this workbench reads records of "
                         f"schema {FIRST_VERSION} to {SCHEMA_VERSION}")
    data.pop("exit_code", None)
    data, passed = migrate(data, SCHEMA_VERSION)
    data["gates"] = [_stored(file, f"gates.{i}", GateOutcome, g)
                     for i, g in enumerate(data.get("gates", []))]
    known = DecisionRecord.__dataclass_fields__
    rec = DecisionRecord(**{k: v for k, v in data.items() if k in known})
    rec.migrated_from = [*rec.migrated_from, *passed]
    return rec


def _stored(file: Path, where: str, kind: type, value: object) -> object:
    """A stored value as its type, or an InputError naming the file and field; unknown
    fields are refused, not dropped (a record with them was not written by this version)."""
    if isinstance(value, dict):
        unknown = sorted(set(value) - {f.name for f in dataclasses.fields(kind)})
        if unknown:
            raise InputError(f"{file}: {where}: unknown field(s) {', '.join(unknown)}")
    try:
        return TypeAdapter(kind).validate_python(value)
    except ValidationError as err:
        first = err.errors()[0]
        prefix = f"{where}." if where else ""
        raise InputError(f"{file}: {prefix}{_field_path(first['loc'])}: {first['msg']}"
                         ) from None


def stored_measurement(run_dir: Path, role: str) -> Measurement | None:
    """A model's stored measurement, checked field by field against its types."""
    file = run_dir / role / MEASUREMENT_FILE
    if not file.is_file():
        return None
    data = read_json(file)
    checked = _stored(file, "", Measurement, data)
    assert isinstance(checked, Measurement)
    return Measurement.from_dict(data)
