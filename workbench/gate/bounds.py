"""The gates that hold one figure to a bound rather than pairing items: token-level fidelity
(KL, top-1 agreement, generation agreement, the flip rate) and memory (a ratio of the
candidate's headroom figure to the baseline's). A figure that is missing fails closed."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from workbench.config.gate_policy import FidelityGate, MemoryGate
from workbench.gate.evidence import Evidence, GateId, GateOutcome
from workbench.gate.latency import ratio
from workbench.gate.paired import count_flips, paired_scores

__all__ = ["fidelity_outcomes", "memory_outcome"]


def memory_outcome(gate: MemoryGate, ev: Evidence) -> GateOutcome:
    bound = "max" if gate.max_ratio is not None else "min"
    limit = float(gate.max_ratio if gate.max_ratio is not None else gate.min_ratio or 0)
    name = GateId("memory", gate.metric, check=f"{bound}_ratio")
    base, cand = ev.base_headroom, ev.cand_headroom
    at = [role for role, figures in ev.unmeasured.items() if gate.metric in figures]
    if at:
        where = f"{gate.metric} cannot be measured at the {' and '.join(at)}'s endpoint"
        if gate.at_endpoints == "not_applicable":
            return GateOutcome.of(name, "not_applicable", f"{where} (policy: at_endpoints: "
                               "not_applicable)")
        return GateOutcome.of(name, "fail", f"{where} (fail closed; a policy that accepts this "
                           "marks the gate at_endpoints: not_applicable)")
    bv, cv = float(base.get(gate.metric) or math.nan), float(cand.get(gate.metric) or math.nan)
    value = ratio(bv, cv)
    if math.isnan(value):
        return GateOutcome.of(name, "fail", f"{gate.metric} not measured (fail closed)")
    ok = value <= limit if bound == "max" else value >= limit
    return GateOutcome.of(name, "pass" if ok else "fail",
                       f"{gate.metric} {bv:.0f} -> {cv:.0f}, ratio {value:.3f} ({bound} {limit})",
                       limit, value, {"baseline": bv, "candidate": cv})


def fidelity_outcomes(gate: FidelityGate, ev: Evidence) -> list[GateOutcome]:
    name = GateId("fidelity", gate.suite)
    out = []
    token_level = ev.fidelity.get(gate.suite) or {}
    agreement = token_level.get("agreement") or {}
    for key, bound, better in (("kl_mean", gate.max_kl_mean, "max"),
                               ("top1_agreement", gate.min_top1_agreement, "min"),
                               ("identical_share", gate.min_identical_share, "min"),
                               ("prefix_agreement", gate.min_prefix_agreement, "min")):
        if bound is None:
            continue
        value = token_level.get(key, agreement.get(key))
        if value is None:
            why = (": a run recorded before generation agreement existed, or with "
                   "agreement_tokens 0" if key in ("identical_share", "prefix_agreement") else "")
            out.append(GateOutcome.of(replace(name, check=key), "fail",
                                      f"{key} of {gate.suite!r} not measured (fail closed{why})"))
            continue
        ok = value <= bound if better == "max" else value >= bound
        out.append(GateOutcome.of(replace(name, check=key), "pass" if ok else "fail",
                               f"{key} {value:.4f} ({better} {bound})", bound, value))
    if gate.max_flip_rate is not None:
        base, cand = ev.base_suites.get(gate.suite), ev.cand_suites.get(gate.suite)
        b, c = paired_scores(base, cand) if base and cand else ([], [])
        if not b:
            out.append(GateOutcome.of(replace(name, check="flip_rate"), "fail",
                                      f"no paired items of {gate.suite!r} (fail closed)"))
        else:
            lost, gained = count_flips(np.asarray(b), np.asarray(c))
            rate = (lost + gained) / len(b)
            out.append(GateOutcome.of(
                replace(name, check="flip_rate"), "pass" if rate <= gate.max_flip_rate else "fail",
                f"{lost} lost + {gained} gained of {len(b)} = {rate:.3f} "
                f"(max {gate.max_flip_rate})", gate.max_flip_rate, rate,
                {"lost": lost, "gained": gained, "paired": len(b)}))
    return out
