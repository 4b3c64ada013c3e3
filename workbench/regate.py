"""Judge a stored run again under a (possibly different) gate policy: no engine, no GPU.

A run folder keeps everything the gates read: each model's measurement
(`baseline/measurement.json`, `candidate/measurement.json`: every item, the load levels,
the headroom), the record (`decision.json`: token-level fidelity, device, seeds) and the
policy it was judged under (`gates.yaml`). CI can re-gate cheaply, and a policy change can
be tried on old runs. Whatever the stored results lack, the gates that need it fail.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from .compare import GateOutcome
from .errors import InputError
from .files import read_json
from .gates import GatePolicy, load_gate_policy
from .measure import MEASUREMENT_FILE, Measurement
from .record import DecisionRecord
from .verdict import judge

__all__ = ["POLICY_FILE", "load_record", "regate", "regate_stored", "stored_measurement"]

POLICY_FILE = "gates.yaml"  # the policy a run was judged under, copied into its folder


def _field_path(loc: tuple) -> str:
    return ".".join(str(part) for part in loc) or "(the whole file)"


def load_record(run_dir: Path) -> DecisionRecord:
    """decision.json, checked against the published schema before any of it is used."""
    import jsonschema

    from .schemas.decision import SCHEMA_FILE

    file = run_dir / "decision.json"
    if not file.is_file():
        raise InputError(f"{run_dir}: no decision.json (not a finished run folder)")
    data = read_json(file)
    schema = json.loads(SCHEMA_FILE.read_text())
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        raise InputError(f"{file}: {_field_path(tuple(error.absolute_path))}: "
                         f"{error.message[:200]} (not a record this workbench wrote: "
                         f"{SCHEMA_FILE.name})")
    data.pop("exit_code", None)
    data["gates"] = [_stored(file, f"gates.{i}", GateOutcome, g)
                     for i, g in enumerate(data.get("gates", []))]
    known = DecisionRecord.__dataclass_fields__
    return DecisionRecord(**{k: v for k, v in data.items() if k in known})


def _stored(file: Path, where: str, kind: type, value: object) -> object:
    """A stored value as its type, or an InputError naming the file and field; unknown
    fields are refused, not dropped (a record with them was not written by this version)."""
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(kind.__dataclass_fields__))
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


def regate(run_dir: Path, policy_path: Path | None = None) -> tuple[DecisionRecord, GatePolicy]:
    """The run's record with its gates and decision judged anew under the policy (the
    run's own stored policy when none is given)."""
    rec = load_record(run_dir)
    path = policy_path or run_dir / POLICY_FILE
    if not path.is_file():
        raise InputError(f"{path}: no gate policy (the run folder keeps none; pass --policy)")
    policy = load_gate_policy(path)
    report = judge(policy, path, stored_measurement(run_dir, "baseline"),
                   stored_measurement(run_dir, "candidate"), rec.fidelity,
                   rec.device.get("kind", "cpu"), run_dir, int(rec.seeds.get("run", 0)))
    rec.gates, rec.decision, rec.policy = report.gates, report.decision, report.policy
    return rec, policy


def regate_stored(run_dir: Path, policy_path: Path | None = None
                  ) -> tuple[DecisionRecord, GatePolicy]:
    """regate(), with the record also rendered once before anything is written: the
    schema types the record's top level only, so a section of the wrong shape inside it
    (a load entry that is null, a gate detail that is a number) is found here and refused
    naming the file, not met halfway through writing the new record."""
    from .record import render_markdown, render_summary

    try:
        rec, policy = regate(run_dir, policy_path)
        render_markdown(rec)
        render_summary(rec)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as err:
        raise InputError(f"{run_dir / 'decision.json'}: a stored section has an unexpected "
                         f"shape ({type(err).__name__}: {str(err)[:160]}); not a record this "
                         "workbench wrote") from None
    return rec, policy
