"""`workbench gate`: a stored run judged again under a (possibly different) gate policy; no
engine, no GPU.

A run folder keeps everything the gates read: each model's measurement
(`baseline/measurement.json`, `candidate/measurement.json`: every item, the load levels,
the headroom), the record (`decision.json`: token-level fidelity, device, seeds) and the
policy it was judged under (`gates.yaml`). CI can re-gate cheaply, and a policy change can
be tried on old runs. Every comparison is computed again from the per-item results at the
new policy's confidence, so the record's tables and its gates agree. Whatever the stored
results lack, the gates that need it fail.
"""

from __future__ import annotations

from pathlib import Path

from workbench.config.gate_policy import GatePolicy, load_gate_policy
from workbench.gate.looks import Looks, at_confidence, one_look
from workbench.gate.verdict import judge
from workbench.mechanisms.errors import InputError
from workbench.record.build import suite_pairs
from workbench.record.decision import SCHEMA_VERSION, DecisionRecord
from workbench.record.render import render_markdown, render_summary
from workbench.record.rollout import rollout_rejudged
from workbench.record.store import POLICY_FILE, load_record, stored_measurement

__all__ = ["regate", "regate_stored"]


def regate(run_dir: Path, policy_path: Path | None = None) -> tuple[DecisionRecord, GatePolicy]:
    """The run's record with its gates, decision and suite comparisons judged anew under
    the policy (the run's own stored policy when none is given)."""
    rec = load_record(run_dir)
    path = policy_path or run_dir / POLICY_FILE
    if not path.is_file():
        raise InputError(f"{path}: no gate policy (the run folder keeps none; pass --policy)")
    policy = load_gate_policy(path)
    base, cand = stored_measurement(run_dir, "baseline"), stored_measurement(run_dir,
                                                                             "candidate")
    dense = rec.served_dense
    report = judge(policy, path, base, cand, rec.fidelity, rec.device.get("kind", "cpu"),
                   run_dir, int(rec.seeds.get("run", 0)), _looks_under(rec, policy),
                   dense["not_judged"] if dense else None)
    rec.gates, rec.decision, rec.policy = report.gates, report.decision, report.policy
    if rec.served_dense and report.judged_here:
        rec.served_dense["judged_here"] = report.judged_here
    rec.comparability = report.comparability
    rec.schema_version = SCHEMA_VERSION  # written anew in the current shape
    if base is not None and cand is not None:
        rec.suites = suite_pairs(*report.sides, report.suites)
    rec.rollout = rollout_rejudged(rec)  # its threshold and trigger read the gates
    return rec, policy


def _looks_under(rec: DecisionRecord, policy: GatePolicy) -> Looks:
    """The run's looks, judged again under this policy: a run that planned two looks
    took each at its share of alpha, and is judged the same way now (its data were
    gathered under that plan)."""
    stored = rec.policy.get("looks") or one_look(policy.confidence, 1,
                                                 rec.sampling.get("profile", ""))
    return at_confidence(stored, policy.confidence)


def regate_stored(run_dir: Path, policy_path: Path | None = None
                  ) -> tuple[DecisionRecord, GatePolicy]:
    """regate(), with the record also rendered once before anything is written: the
    schema types the record's top level only, so a section of the wrong shape inside it
    (a load entry that is null, a gate detail that is a number) is found here and refused
    naming the file, not met halfway through writing the new record."""
    try:
        rec, policy = regate(run_dir, policy_path)
        render_markdown(rec)
        render_summary(rec)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as err:
        raise InputError(f"{run_dir / 'decision.json'}: a stored section has an unexpected "
                         f"shape ({type(err).__name__}: {str(err)[:160]}); not a record this "
                         "workbench wrote") from None
    return rec, policy
