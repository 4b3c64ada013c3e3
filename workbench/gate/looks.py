"""Two looks at the evidence: the profile's sample first, every item when the sample left a
candidate open for want of items (the policy's `second_look`).

Looking twice and keeping the better answer would let a worse candidate pass twice as
often, so a run that may look twice judges both looks at half the policy's alpha
(Bonferroni over the looks: a false pass at either look has chance at most alpha/2, so
at most alpha in all; docs/gates.md, "Two looks"). A fail at the first look stands: the
second look is taken only when nothing failed. Whether a run may look twice is known
before the first look is judged, so the first look is judged at the split alpha too.
"""

from __future__ import annotations

from collections.abc import Collection

from typing_extensions import NotRequired, TypedDict

from workbench.config.gate_policy import split_confidence
from workbench.gate.evidence import GateOutcome
from workbench.gate.gates import POOLED

__all__ = ["FIRST_LOOK_DIR", "FirstLook", "Looks", "at_confidence",
           "more_items_could_decide", "one_look", "planned_looks", "second_look_due"]

FIRST_LOOK_DIR = "look-1"


class FirstLook(TypedDict):
    profile: str
    decision: str
    open_gates: list[str]  # inconclusive gates whose suites have more items at full
    folder: str  # the first look's measurements and record, relative to the run folder


class Looks(TypedDict):
    planned: int  # 2 when this run could look again at every item, else 1
    taken: int
    policy_confidence: float  # the policy's own level
    confidence_per_look: float  # the level each look was judged at
    profiles: list[str]  # the profile of each look taken
    first_look: FirstLook | None  # when a second look was taken
    # why a second look that was due was not taken (the policy's second_look_max_minutes)
    skipped: NotRequired[str]


def planned_looks(second_look: bool, growing: Collection[str]) -> int:
    """2 when the policy allows a second look and some suite has items the profile's
    sample leaves out; else 1 (the policy's alpha whole)."""
    return 2 if second_look and growing else 1


def one_look(confidence: float, planned: int, profile: str) -> Looks:
    """The looks of a run judged once so far (at the per-look level when it planned two)."""
    return Looks(planned=planned, taken=1, policy_confidence=confidence,
                 confidence_per_look=split_confidence(confidence, planned),
                 profiles=[profile], first_look=None)


def at_confidence(looks: Looks, confidence: float) -> Looks:
    """The same looks under a policy of another level (a stored run judged again): the
    data were gathered under the run's plan of looks, so each look keeps its share."""
    return Looks(planned=looks["planned"], taken=looks["taken"],
                 policy_confidence=confidence,
                 confidence_per_look=split_confidence(confidence, looks["planned"]),
                 profiles=looks["profiles"], first_look=looks["first_look"])


def more_items_could_decide(gates: list[GateOutcome], growing: set[str]) -> list[str]:
    """The counted inconclusive gates that judge a suite with more items at full (the
    pooled health gate when any generating suite grows): what a second look could decide.
    Latency, memory and comparability gain nothing from more items."""
    out = []
    for g in gates:
        if g.status != "inconclusive" or g.informational or g.id is None:
            continue
        if g.id.subject in growing or (g.id.subject == POOLED and growing):
            out.append(g.gate)
    return out


def second_look_due(looks: Looks, decision: str, gates: list[GateOutcome],
                    growing: set[str]) -> list[str]:
    """The gates a second look would be taken for: none unless this run planned two
    looks, has taken one, failed nothing and left a gate open that more items decide."""
    if looks["planned"] < 2 or looks["taken"] != 1 or decision != "inconclusive":
        return []
    return more_items_could_decide(gates, growing)
