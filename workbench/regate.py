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

from .compare import Evidence, GateOutcome, decide, evaluate_gates
from .errors import InputError
from .gates import GatePolicy, load_gate_policy
from .measure import MEASUREMENT_FILE, Measurement
from .record import DecisionRecord, policy_summary

__all__ = ["POLICY_FILE", "load_record", "regate"]

POLICY_FILE = "gates.yaml"  # the policy a run was judged under, copied into its folder


def load_record(run_dir: Path) -> DecisionRecord:
    file = run_dir / "decision.json"
    if not file.is_file():
        raise InputError(f"{run_dir}: no decision.json (not a finished run folder)")
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise InputError(f"{file}: not valid JSON ({err.msg})") from None
    data.pop("exit_code", None)
    data["gates"] = [GateOutcome(**g) for g in data.get("gates", [])]
    known = DecisionRecord.__dataclass_fields__
    return DecisionRecord(**{k: v for k, v in data.items() if k in known})


def _measurement(run_dir: Path, role: str) -> Measurement | None:
    file = run_dir / role / MEASUREMENT_FILE
    return Measurement.from_dict(json.loads(file.read_text())) if file.is_file() else None


def stored_evidence(run_dir: Path, rec: DecisionRecord) -> Evidence:
    base, cand = _measurement(run_dir, "baseline"), _measurement(run_dir, "candidate")
    return Evidence(
        base_suites=base.suites if base else {}, cand_suites=cand.suites if cand else {},
        base_load=base.load if base else None, cand_load=cand.load if cand else None,
        device=rec.device.get("kind", "cpu"),
        base_headroom=base.headroom if base else {}, cand_headroom=cand.headroom if cand else {},
        fidelity=rec.fidelity,
        raw_dirs=(run_dir / "baseline" / "load", run_dir / "candidate" / "load"))


def regate(run_dir: Path, policy_path: Path | None = None) -> tuple[DecisionRecord, GatePolicy]:
    """The run's record with its gates and decision judged anew under the policy (the
    run's own stored policy when none is given)."""
    rec = load_record(run_dir)
    path = policy_path or run_dir / POLICY_FILE
    if not path.is_file():
        raise InputError(f"{path}: no gate policy (the run folder keeps none; pass --policy)")
    policy = load_gate_policy(path)
    outcomes = evaluate_gates(policy, stored_evidence(run_dir, rec), int(rec.seeds.get("run", 0)))
    rec.gates = outcomes
    rec.decision = decide(outcomes, policy.inconclusive_blocks)
    rec.policy = policy_summary(policy, path, outcomes)
    return rec, policy
