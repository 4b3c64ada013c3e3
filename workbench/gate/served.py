"""The gates a candidate's served form cannot judge: where its weights are served
dequantised (an int4 candidate on a CPU with no int4 kernel: quantize/formats.py), the
load test and the memory headroom would measure a dense model, not the candidate's own
format. Those gates are not measured, with the reason, so that no figure that is not the
candidate's own ever passes a speed or memory gate, and a decision that needs them is
never a promotion (gates.decide)."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from workbench.gate.early import LOAD_SECTIONS
from workbench.gate.evidence import GateOutcome
from workbench.gate.gates import decide

__all__ = ["NOT_OWN_SECTIONS", "decided_here", "mark_not_own"]

# latency, SLOs, capacity (the load test) and memory (the headroom, weights on disk too)
NOT_OWN_SECTIONS = LOAD_SECTIONS | {"memory"}


def mark_not_own(outcomes: list[GateOutcome], why: str | None) -> list[GateOutcome]:
    """Each speed and memory gate not measured, saying why (why None: as they are); one
    that does not apply here (a CUDA-only gate on a CPU) stays not applicable."""
    if why is None:
        return outcomes
    return [replace(o, status="not_measured", detail=why, value=None, evidence={})
            if o.identity.section in NOT_OWN_SECTIONS and o.status != "not_applicable" else o
            for o in outcomes]


def decided_here(outcomes: list[GateOutcome], inconclusive_blocks: bool
                 ) -> Literal["promote", "reject", "inconclusive"]:
    """The decision on every gate this device can judge for a candidate served dense: its
    speed and memory gates left out, the rest as the final decision counts them. What
    `tune` searches on such a device, and what decision.md tells a user who will judge
    speed and memory where the format has a kernel."""
    return decide([o for o in outcomes if o.identity.section not in NOT_OWN_SECTIONS],
                  inconclusive_blocks)
