"""Compare & gate, as one step that evaluate, gate and sweep share: the two models'
measurements and the token-level fidelity become the evidence, every suite is compared
item by item once, the policy judges it, and the result is a gate report. Built here
once, so a stored run re-judged by `gate` and a fresh run judged by `evaluate` cannot see
different evidence, and the record's tables show the very intervals the gates judged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from typing_extensions import TypedDict

from workbench.config.gate_policy import GatePolicy
from workbench.gate.comparability import ComparabilitySection
from workbench.gate.early import mark_not_measured
from workbench.gate.evidence import Evidence, GateOutcome, LoadView
from workbench.gate.gates import decide, evaluate_gates, measured_kinds
from workbench.gate.looks import Looks, one_look
from workbench.gate.paired import ALL, Comparisons, SliceComparison
from workbench.gate.served import decided_here, mark_not_own
from workbench.gate.traffic import pair_traffic
from workbench.measure.measurement import LOAD_DIR, Measurement, further_load_dir
from workbench.suites.definition import Suite
from workbench.suites.results import SuiteResult
from workbench.suites.scorers.fidelity import compare_fidelity

__all__ = ["Flips", "GateReport", "PolicySection", "SuiteComparison", "compare_suites", "evidence",
           "judge", "policy_summary", "token_fidelity"]


class PolicySection(TypedDict):
    path: str
    sha256: str
    confidence: float
    bootstrap_resamples: int
    inconclusive_blocks: bool
    multiple_comparisons: str
    gates_judged: int
    paired_tests: int
    alpha_one_sided: float
    family_false_fail_bound: float
    tests: int  # paired tests and floors: what the false-reject bound counts
    # absolute gates the baseline itself does not meet: it misses them (fail), or cannot
    # be shown to meet them at this n (inconclusive); no candidate can be expected to pass
    baseline_misses: list[str]
    baseline_unproven: list[str]
    coverage: dict[str, str]  # each measured suite: the gate that judges it, or why none
    informational: list[str]  # gates shown but not counted in the decision
    looks: Looks  # how many times the run looked at its items, at which level each


class Flips(TypedDict):
    paired: int
    to_wrong: int
    to_right: int


@dataclass(frozen=True)
class SuiteComparison:
    """One suite's paired comparison: its score on the whole suite and each slice, and its
    generation health when both models generated text."""

    score: dict[str, SliceComparison]
    health: dict[str, SliceComparison] | None = None

    @property
    def flips(self) -> Flips:
        overall = self.score.get(ALL)
        if overall is None:
            return Flips(paired=0, to_wrong=0, to_right=0)
        return Flips(paired=overall["n"], to_wrong=overall["flips_to_wrong"],
                     to_right=overall["flips_to_right"])


@dataclass(frozen=True)
class GateReport:
    """Every gate's outcome, the decision they add up to, what judged them, and the
    paired comparison of every suite both models answered (what the gates read)."""

    gates: list[GateOutcome]
    decision: Literal["promote", "reject", "inconclusive"]
    policy: PolicySection
    suites: dict[str, SuiteComparison] = field(default_factory=dict)
    # a candidate served dense: the decision on the gates this device can judge (its
    # speed and memory left out: gate/served.py); None for one served as built
    judged_here: Literal["promote", "reject", "inconclusive"] | None = None
    # each side's suites as the gates read them (a traffic suite scored against the
    # baseline's answers, gate/traffic.py): what the record's suite summaries show
    sides: tuple[dict[str, SuiteResult], dict[str, SuiteResult]] = field(
        default_factory=lambda: ({}, {}))

    @property
    def comparability(self) -> ComparabilitySection:
        """What the comparability gate compared (its evidence: computed once, there)."""
        gate = next((g for g in self.gates if g.identity.section == "comparability"), None)
        if gate is None or not gate.evidence:
            return ComparabilitySection(checks=[], prefix_cache_at_start={}, candidate_args=[])
        ev = gate.evidence
        return ComparabilitySection(checks=ev["checks"],
                                    prefix_cache_at_start=ev["prefix_cache_at_start"],
                                    candidate_args=ev["candidate_args"])


def evidence(base: Measurement | None, cand: Measurement | None, fidelity: dict, device: str,
             run_dir: Path) -> Evidence:
    """What the gates see. A side that was not measured contributes nothing, and every
    gate that needs it fails closed. A traffic suite's answers are scored against the
    baseline's here (gate/traffic.py), once, for every gate that reads them."""
    base_suites, cand_suites = pair_traffic(base.suites if base else {},
                                            cand.suites if cand else {})
    return Evidence(
        base_suites=base_suites, cand_suites=cand_suites,
        base_load=base.load if base else None, cand_load=cand.load if cand else None,
        device=device,
        base_headroom=base.headroom if base else {}, cand_headroom=cand.headroom if cand else {},
        fidelity=fidelity,
        # per-request load data, for the latency ratios' intervals
        raw_dirs=(run_dir / "baseline" / LOAD_DIR, run_dir / "candidate" / LOAD_DIR),
        unmeasured={role: m.server.unmeasured for role, m in (("baseline", base),
                                                              ("candidate", cand))
                    if m is not None and m.server.unmeasured},
        servers=(base.server if base else None, cand.server if cand else None),
        profile=next((m.load.name for m in (base, cand) if m is not None), ""),
        further=_further_load(base, cand, run_dir))


def _further_load(base: Measurement | None, cand: Measurement | None, run_dir: Path
                  ) -> dict[str, LoadView]:
    """Each further load profile either side measured; one the other side lacks is None
    there, and its gates fail closed."""
    names = list(dict.fromkeys([*(base.further_load if base else {}),
                                *(cand.further_load if cand else {})]))
    return {name: LoadView(
        base.further_load.get(name) if base else None,
        cand.further_load.get(name) if cand else None,
        (run_dir / "baseline" / further_load_dir(name),
         run_dir / "candidate" / further_load_dir(name)))
        for name in names}


def judge(policy: GatePolicy, policy_path: Path, base: Measurement | None,
          cand: Measurement | None, fidelity: dict, device: str, run_dir: Path,
          seed: int, looks: Looks | None = None, not_own: str | None = None) -> GateReport:
    """The policy's verdict on the evidence. looks: how this run looks at its items (one
    look at the policy's level unless given); each look is judged at its share of alpha.
    not_own: why the candidate's speed and memory are not its own format's (served
    dense), its gates then not measured (gate/served.py)."""
    looks = looks or one_look(policy.confidence, 1, "")
    per_look = policy.for_look(looks["planned"])
    ev = evidence(base, cand, fidelity, device, run_dir)
    compared = Comparisons(per_look.confidence, per_look.bootstrap_resamples, seed)
    stopped = cand.stopped if cand else None
    outcomes = mark_not_own(mark_not_measured(evaluate_gates(per_look, ev, seed, compared),
                                              stopped, ev.base_suites, policy.health),
                            not_own)
    decision = decide(outcomes, per_look.inconclusive_blocks)
    if stopped is not None and decision == "promote":
        # judged again under a laxer policy, a stopped run whose gates all pass still
        # lacks what it did not measure (its load test at least): never a promotion
        decision = "inconclusive"
    return GateReport(outcomes, decision,
                      policy_summary(per_look, policy_path, outcomes, measured_kinds(ev),
                                     looks),
                      compare_suites(ev, compared),
                      decided_here(outcomes, per_look.inconclusive_blocks) if not_own else None,
                      (ev.base_suites, ev.cand_suites))


def compare_suites(ev: Evidence, compared: Comparisons) -> dict[str, SuiteComparison]:
    """Every suite both models answered, gated or not (fidelity suites are compared token
    by token instead), from the same comparisons the gates read."""
    out = {}
    for name, base in ev.base_suites.items():
        cand = ev.cand_suites.get(name)
        if cand is None or base.kind == "fidelity":
            continue
        health = compared.table(base, cand, "healthy") if base.generates and cand.generates \
            else None
        out[name] = SuiteComparison(compared.table(base, cand), health)
    return out


def token_fidelity(suites: list[Suite], run_dir: Path,
                   keep: Callable[[str], bool] | None = None) -> dict[str, dict]:
    """Token-level fidelity for every fidelity suite, from both runs' stored log-probs
    (keep: which item ids count, a split's half; None: all)."""
    out = {}
    for suite in suites:
        if suite.spec.kind != "fidelity":
            continue
        base, cand = (run_dir / role / f"logprobs-{suite.name}.jsonl"
                      for role in ("baseline", "candidate"))
        if base.is_file() and cand.is_file():
            slices = {it.id: it.slices for it in suite.items}
            out[suite.name] = compare_fidelity(suite.name, base, cand, slices, keep).to_dict()
    return out


def policy_summary(policy: GatePolicy, path: Path, outcomes: list[GateOutcome],
                   measured: dict[str, str] | None = None, looks: Looks | None = None
                   ) -> PolicySection:
    """Which policy judged the run, what running many tests means for a false reject, the
    gates the baseline itself misses, and how each measured suite was judged."""
    paired = [o for o in outcomes if "mcnemar_p" in o.evidence]
    tests = [o for o in outcomes if "p_fail" in o.evidence]
    alpha = (1 - policy.confidence) / 2
    holm = policy.multiple_comparisons == "holm"
    counted = [o for o in outcomes if not o.informational]
    return {
        "path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "confidence": policy.confidence, "bootstrap_resamples": policy.bootstrap_resamples,
        "inconclusive_blocks": policy.inconclusive_blocks,
        "multiple_comparisons": policy.multiple_comparisons,
        "gates_judged": sum(o.status not in ("not_applicable", "not_measured")
                            for o in counted),
        "paired_tests": len(paired), "alpha_one_sided": alpha, "tests": len(tests),
        # a candidate acceptable in truth (every delta at or above its margin, every rate
        # meeting its floor) fails one test with chance <= alpha; over k tests, some fail
        # with chance <= k*alpha (Bonferroni, whatever their dependence), or <= alpha when
        # Holm adjusts the fails (gates.bound_false_rejects; docs/gates.md)
        "family_false_fail_bound": round(alpha if holm else min(1.0, len(tests) * alpha), 4),
        "baseline_misses": [o.gate for o in counted if o.baseline_status == "fail"],
        "baseline_unproven": [o.gate for o in counted if o.baseline_status == "inconclusive"],
        "coverage": policy.gated_by(measured or {}),
        "informational": [o.gate for o in outcomes if o.informational],
        "looks": looks or one_look(policy.confidence, 1, ""),
    }
