"""Compare & gate, as one step that evaluate, gate and sweep share: the two models'
measurements and the token-level fidelity become the evidence, the policy judges it, and
the result is a gate report. Built here once, so a stored run re-judged by `gate` and a
fresh run judged by `evaluate` cannot see different evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .compare import Evidence, GateOutcome, decide, evaluate_gates
from .gates import GatePolicy
from .measure import Measurement
from .record import policy_summary
from .sections import PolicySection

__all__ = ["GateReport", "evidence", "judge"]


@dataclass(frozen=True)
class GateReport:
    """Every gate's outcome, the decision they add up to, and what judged them."""

    gates: list[GateOutcome]
    decision: Literal["promote", "reject", "inconclusive"]
    policy: PolicySection


def evidence(base: Measurement | None, cand: Measurement | None, fidelity: dict, device: str,
             run_dir: Path) -> Evidence:
    """What the gates see. A side that was not measured contributes nothing, and every
    gate that needs it fails closed."""
    return Evidence(
        base_suites=base.suites if base else {}, cand_suites=cand.suites if cand else {},
        base_load=base.load if base else None, cand_load=cand.load if cand else None,
        device=device,
        base_headroom=base.headroom if base else {}, cand_headroom=cand.headroom if cand else {},
        fidelity=fidelity,
        # per-request load data, for the latency ratios' intervals
        raw_dirs=(run_dir / "baseline" / "load", run_dir / "candidate" / "load"),
        unmeasured={role: m.server.unmeasured for role, m in (("baseline", base),
                                                              ("candidate", cand))
                    if m is not None and m.server.unmeasured})


def judge(policy: GatePolicy, policy_path: Path, base: Measurement | None,
          cand: Measurement | None, fidelity: dict, device: str, run_dir: Path,
          seed: int) -> GateReport:
    outcomes = evaluate_gates(policy, evidence(base, cand, fidelity, device, run_dir), seed)
    return GateReport(outcomes, decide(outcomes, policy.inconclusive_blocks),
                      policy_summary(policy, policy_path, outcomes))
