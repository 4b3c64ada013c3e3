"""The gates a candidate's served form cannot judge: where its weights are served
dequantised (an int4 candidate on a CPU with no int4 kernel: quantize/formats.py), the
load test and the memory headroom would measure a dense model, not the candidate's own
format. Those gates are not measured, with the reason, so that no figure that is not the
candidate's own ever passes a speed or memory gate, and a decision that needs them is
never a promotion (gates.decide)."""

from __future__ import annotations

from dataclasses import replace

from workbench.gate.early import LOAD_SECTIONS
from workbench.gate.evidence import GateOutcome

__all__ = ["NOT_OWN_SECTIONS", "mark_not_own"]

# latency, SLOs, capacity (the load test) and memory (the headroom, weights on disk too)
NOT_OWN_SECTIONS = LOAD_SECTIONS | {"memory"}


def mark_not_own(outcomes: list[GateOutcome], why: str | None) -> list[GateOutcome]:
    """Each speed and memory gate not measured, saying why (why None: as they are)."""
    if why is None:
        return outcomes
    return [replace(o, status="not_measured", detail=why, value=None, evidence={})
            if o.identity.section in NOT_OWN_SECTIONS else o for o in outcomes]
