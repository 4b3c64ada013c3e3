"""Every gate of a policy judged on one candidate's evidence against its baseline.

Quality, safety, structured output and generation health are non-inferiority tests on the
paired comparisons (paired.py); fidelity, latency, the SLO and memory read their figures.
A gate whose metric is missing fails: the policy fails closed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Literal

from workbench.config.gate_policy import (
    CapacityGate,
    GatePolicy,
    HealthGate,
    LatencyGate,
    QualityGate,
    SLOGate,
)
from workbench.gate.bounds import fidelity_outcomes, memory_outcome
from workbench.gate.capacity import CAPACITY_GATE, capacity_outcome
from workbench.gate.comparability import comparability
from workbench.gate.evidence import Evidence, GateId, GateOutcome
from workbench.gate.floors import rate_bound, slo_gate_id, slo_outcome
from workbench.gate.latency import (
    latency_gate_id,
    latency_outcomes,
)
from workbench.gate.paired import (
    Comparisons,
    PairedDelta,
    Status,
    clears_above,
    clears_below,
    evidence_strength,
    holm_adjust,
    nothing_to_lose,
)
from workbench.suites.results import SuiteResult

__all__ = ["bound_false_rejects", "decide", "evaluate_gates",
           "non_inferiority"]

POOLED = "(pooled)"  # the pooled health gate's subject: every generating suite's items


def non_inferiority(delta: PairedDelta, margin: float) -> Status:
    if clears_above(delta.ci_low, -margin):
        return "pass"
    if clears_below(delta.ci_high, -margin):
        return "fail"
    return "inconclusive"


@dataclass
class _PairedCheck:
    label: GateId
    margin: float
    slice_name: str | None = None  # None: the whole suite
    delta: PairedDelta | None = None
    outcome: GateOutcome | None = None  # decided without a test (missing, too small)
    constant_baseline: bool = False  # the baseline answered every item alike: no power


def _paired_checks(section: str, gate: QualityGate, base: SuiteResult | None,
                   cand: SuiteResult | None, compared: Comparisons,
                   name: GateId | None = None
                   ) -> tuple[list[_PairedCheck], list[GateOutcome]]:
    """The tests a paired gate asks for (overall, each slice), and its floors' outcomes."""
    name = name or GateId(section, gate.suite,
                          metric=gate.metric if gate.metric != "score" else None)
    if base is None or cand is None:
        missing = "baseline" if base is None else "candidate"
        return [], [GateOutcome.of(name, "fail", f"{missing} results of suite {gate.suite!r} "
                                "missing (fail closed)")]
    checks = [_PairedCheck(name, gate.max_drop)]
    floors: list[GateOutcome] = []
    slices = [(s, info["n"]) for s, info in base.slices.items()] if gate.slice_max_drop else []
    for s, n in slices:
        label = replace(name, slice=s)
        if n < gate.min_slice_items:
            checks.append(_PairedCheck(label, gate.slice_max_drop or 0.0, s, outcome=GateOutcome.of(
                label, "not_applicable", f"too small to decide: n={n} < min_slice_items "
                f"{gate.min_slice_items}")))
        else:
            checks.append(_PairedCheck(label, gate.slice_max_drop or 0.0, s))
    for check in checks:
        if check.outcome is not None:
            continue
        paired = compared.of(base, cand, check.slice_name, gate.metric)
        if paired is None:
            check.outcome = GateOutcome.of(check.label, "fail", f"no paired items with "
                                        f"{gate.metric!r} (fail closed)")
            continue
        check.delta = paired.against(check.margin)
        # one answer to every item, and the candidate changed none: the suite could not
        # have shown a change
        check.constant_baseline = paired.constant_baseline
    overall = checks[0].delta
    if overall is not None and gate.min_recovery is not None:
        ratio = overall.candidate / overall.baseline if overall.baseline > 0 else math.nan
        floors.append(GateOutcome.of(
            replace(name, check="recovery"), "pass" if ratio >= gate.min_recovery else "fail",
            f"candidate/baseline {overall.candidate:.3f}/{overall.baseline:.3f} = {ratio:.3f} "
            f"(min {gate.min_recovery})", gate.min_recovery, ratio))
    bounds = [(b, side) for b, side in ((gate.min_value, "min"), (gate.max_value, "max"))
              if b is not None]
    floors += [rate_bound(name, gate.metric, bound, side, base, cand, compared)
               for bound, side in bounds]
    return checks, floors


def _judge_paired(checks: list[_PairedCheck], policy: GatePolicy) -> list[GateOutcome]:
    """Each test's outcome by its interval. A pass needs no adjustment for the number of
    tests: the decision promotes only when every gate passes (an intersection-union test,
    docs/gates.md); false rejects are bounded afterwards (bound_false_rejects)."""
    outcomes = []
    for check in checks:
        if check.outcome is not None:
            outcomes.append(check.outcome)
            continue
        d = check.delta
        assert d is not None
        status = non_inferiority(d, check.margin)
        extra = ""
        if nothing_to_lose(d.baseline, check.margin):
            if check.slice_name is not None:
                outcomes.append(GateOutcome.of(check.label, "not_applicable", (
                    f"nothing to lose: the baseline's {d.baseline:.3f} is within the slice "
                    f"margin {check.margin:.3f}, so no candidate could fail it")))
                continue
            # a pass that could not have failed is no evidence; the policy should ungate
            # the suite and say why
            status = "inconclusive"
            extra += (f"; the baseline's own {d.baseline:.3f} is within the margin "
                      f"{check.margin:.3f}: a candidate that lost every item would pass, so "
                      "this gate cannot fail (ungate the suite or tighten the margin)")
        if check.constant_baseline and status == "pass" \
                and d.flips_to_wrong + d.flips_to_right == 0:
            status = "inconclusive"  # a pass it could not have failed is no evidence
            extra += (f"; the baseline gives the same answer to all {d.n} items: this "
                      "suite cannot see a change")
        strength = evidence_strength(d, check.margin, policy.confidence, status)
        extra += f"; could detect a drop of {strength['detectable_drop']:.3f}"
        if strength["items_to_decide"] is not None:
            extra += f", about {strength['items_to_decide']} more items would decide it"
            if strength["churn"] > strength["tolerable_churn"]:
                extra += (f"; it changed {strength['churn']:.1%} of the answers, and {d.n} "
                          f"items pass a candidate with no loss that changes at most "
                          f"{strength['tolerable_churn']:.1%} (80% chance)")
        detail = (f"{d.baseline:.3f} -> {d.candidate:.3f}, delta {d.delta:+.3f} "
                  f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}] vs margin -{check.margin:.3f}; "
                  f"flips {d.flips_to_wrong} lost / {d.flips_to_right} gained, "
                  f"McNemar p={d.mcnemar_p:.3g}, n={d.n}{extra}")
        outcomes.append(GateOutcome.of(check.label, status, detail, -check.margin, d.delta,
                                    {**asdict(d), **strength,
                                     "constant_baseline": check.constant_baseline,
                                     "p_fail": d.p_acceptable}))
    return outcomes


def bound_false_rejects(outcomes: list[GateOutcome], policy: GatePolicy) -> list[GateOutcome]:
    """Under `multiple_comparisons: holm`, a test's fail stands only when its one-sided
    p-value of "acceptable" (evidence p_fail), Holm-adjusted across every paired test and
    floor, is at most alpha: an acceptable candidate is then rejected by any of them with
    chance at most alpha (docs/gates.md, "False rejects"). A fail that does not survive
    the adjustment is inconclusive."""
    tests = [i for i, o in enumerate(outcomes) if isinstance(o.evidence.get("p_fail"), float)
             and not math.isnan(o.evidence["p_fail"])]
    if policy.multiple_comparisons != "holm" or not tests:
        return outcomes
    alpha = (1 - policy.confidence) / 2
    adjusted = holm_adjust([outcomes[i].evidence["p_fail"] for i in tests])
    out = list(outcomes)
    for i, p_adj in zip(tests, adjusted, strict=True):
        o = out[i]
        evidence = {**o.evidence, "p_fail_adjusted": p_adj}
        if o.status != "fail":
            out[i] = replace(o, evidence=evidence)
        elif p_adj <= alpha:
            out[i] = replace(o, evidence=evidence, detail=o.detail + (
                f"; Holm-adjusted p={p_adj:.3g} over {len(tests)} tests (alpha {alpha:.3g})"))
        else:
            out[i] = replace(o, status="inconclusive", evidence=evidence, detail=o.detail + (
                f"; not a reject once {len(tests)} tests are counted: Holm-adjusted "
                f"p={p_adj:.3g} > alpha {alpha:.3g}"))
    return out


def _has_health(result: SuiteResult) -> bool:
    return any("healthy" in i.checks for i in result.items)


def _pooled(results: list[SuiteResult]) -> SuiteResult:
    """Every item of several suites as one result (ids prefixed by their suite)."""
    items = [replace(i, id=f"{r.suite}/{i.id}") for r in results for i in r.items]
    return SuiteResult(suite=POOLED, version="", digest="", n=len(items), accuracy=0.0,
                       slices={}, items_file="", items=items, kind="pooled", generates=True)


def _health_gate_checks(gate: HealthGate, ev: Evidence, compared: Comparisons
                        ) -> tuple[list[_PairedCheck], list[GateOutcome]]:
    """Health non-inferiority per generating suite and pooled: paired like any check."""
    names = gate.suites or sorted(n for n, r in ev.base_suites.items()
                                  if r.generates and n in ev.cand_suites)
    if not names:
        return [], [GateOutcome.of(GateId("health"), "not_applicable",
                                   "no suite of this run generates text")]
    checks: list[_PairedCheck] = []
    outcomes: list[GateOutcome] = []
    measured = []
    for name in names:
        base, cand = ev.base_suites.get(name), ev.cand_suites.get(name)
        if base is not None and cand is not None and not (_has_health(base)
                                                          and _has_health(cand)):
            outcomes.append(GateOutcome.of(GateId("health", name), "fail", "no generation-health "
                                        "evidence for this suite (recorded before health "
                                        "checks existed: measure it again; fail closed)"))
            continue
        rule = QualityGate(suite=name, metric="healthy", max_drop=gate.max_drop,
                           min_value=gate.min_value)
        c, f = _paired_checks("health", rule, base, cand, compared, GateId("health", name))
        checks += c
        outcomes += f
        if c and base is not None and cand is not None:
            measured.append((base, cand))
    if gate.pooled_max_drop is not None and len(measured) > 1:
        rule = QualityGate(suite=POOLED, metric="healthy", max_drop=gate.pooled_max_drop,
                           min_value=gate.min_value)
        c, f = _paired_checks("health", rule, _pooled([b for b, _ in measured]),
                              _pooled([c for _, c in measured]), compared,
                              GateId("health", POOLED))
        checks += c
        outcomes += f
    return checks, outcomes


def evaluate_gates(policy: GatePolicy, ev: Evidence, seed: int,
                   compared: Comparisons | None = None) -> list[GateOutcome]:
    """Every gate of the policy, judged on the evidence: pass, fail, inconclusive or
    not_applicable, each with what it saw. Paired gates read their comparison from
    `compared` (verdict.judge passes the one the record's tables read too)."""
    compared = compared or Comparisons(policy.confidence, policy.bootstrap_resamples, seed)
    checks: list[_PairedCheck] = []
    floors: list[GateOutcome] = []
    for section, gate in policy.paired(measured_kinds(ev)):
        c, f = _paired_checks(section, gate, ev.base_suites.get(gate.suite),
                              ev.cand_suites.get(gate.suite), compared)
        checks += c
        floors += f
    if policy.health is not None:
        c, f = _health_gate_checks(policy.health, ev, compared)
        checks += c
        floors += f
    outcomes = _judge_paired(checks, policy) + floors
    for fid in policy.fidelity:
        outcomes += fidelity_outcomes(fid, ev)
    outcomes += _load_outcomes(policy, ev, seed, compared.confidence)
    for mem in policy.memory:
        outcomes.append(memory_outcome(mem, ev))
    if ev.servers is not None:
        outcomes.append(comparability(*ev.servers, ev.base_suites, ev.cand_suites)[1])
    return bound_false_rejects(outcomes, policy)


LoadGate = LatencyGate | SLOGate | CapacityGate


def _load_outcomes(policy: GatePolicy, ev: Evidence, seed: int, confidence: float
                   ) -> list[GateOutcome]:
    """The latency, SLO and capacity gates on each load profile the run gates, named with
    the profile when there are several; a gate whose `profiles` names none of them is not
    applicable (docs/load.md, 'Several load classes')."""
    views = ev.load_views()
    outcomes: list[GateOutcome] = []
    gates: list[LoadGate] = [*policy.latency, *policy.slo, *policy.capacity]
    for gate in gates:
        judged = [(name, view) for name, view in views
                  if gate.profiles is None or view.profile in gate.profiles]
        if not judged:
            outcomes.append(GateOutcome.of(
                _load_gate_id(gate), "not_applicable", f"judges load profile(s) "
                f"{', '.join(gate.profiles or [])}; this run gates "
                f"{', '.join(v.profile for _, v in views)}"))
        for name, view in judged:
            found = _one_load_gate(gate, policy, view, seed, confidence)
            outcomes += found if name is None else [_for_profile(o, name) for o in found]
    return outcomes


def _one_load_gate(gate: LoadGate, policy: GatePolicy, ev: Evidence, seed: int,
                   confidence: float) -> list[GateOutcome]:
    if isinstance(gate, LatencyGate):
        return latency_outcomes(gate, ev, policy, seed)
    if isinstance(gate, SLOGate):
        return [slo_outcome(gate, ev, confidence, seed)]
    return [capacity_outcome(gate, ev)]


def _load_gate_id(gate: LoadGate) -> GateId:
    """A load gate's name before any level, as its own module names it."""
    if isinstance(gate, LatencyGate):
        return latency_gate_id(gate)
    if isinstance(gate, SLOGate):
        return slo_gate_id(gate)
    return CAPACITY_GATE


def _for_profile(outcome: GateOutcome, profile: str) -> GateOutcome:
    """The outcome named with the load profile it judged."""
    gate_id = replace(outcome.identity, profile=profile)
    return replace(outcome, gate=str(gate_id), id=gate_id)


def measured_kinds(ev: Evidence) -> dict[str, str]:
    """Every suite either model measured, by kind: what the policy's defaults apply to."""
    return {r.suite: r.kind for r in (*ev.base_suites.values(), *ev.cand_suites.values())}


def decide(outcomes: list[GateOutcome], inconclusive_blocks: bool = True
           ) -> Literal["promote", "reject", "inconclusive"]:
    """Reject on any failure (or when nothing was judged); promote when every applicable
    gate passed, or when the rest are inconclusive and the policy lets that through; a
    gate left not measured (a candidate stopped early) never lets a promotion through.
    Informational gates are shown, never counted."""
    judged = [o for o in outcomes if o.status != "not_applicable" and not o.informational]
    if not judged or any(o.status == "fail" for o in judged):
        return "reject"
    if any(o.status == "not_measured" for o in judged):
        return "inconclusive"
    if inconclusive_blocks and any(o.status == "inconclusive" for o in judged):
        return "inconclusive"
    return "promote"
