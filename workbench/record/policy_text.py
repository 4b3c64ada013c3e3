"""What the policy made of a run, in words: each gate's mark, the policy's false-reject
bound and coverage, the headline when the baseline itself misses absolute gates, and the
one when the sample sizes, not the candidate, left the decision open."""

from __future__ import annotations

from workbench.gate.evidence import GateOutcome
from workbench.gate.verdict import PolicySection
from workbench.record.sections import EarlyStopJson, ServedDenseJson

__all__ = ["MARK", "early_stop_lines", "gate_mark", "headlines", "looks_line", "policy_defect",
           "policy_lines", "served_dense_lines", "undersized_headline"]

MARK = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE", "not_applicable": "n/a",
        "not_measured": "NOT MEASURED"}


def early_stop_lines(stop: EarlyStopJson | None) -> list[str]:
    """Which gates failed past doubt, at which level, and what was not measured; nothing
    for a candidate measured in full."""
    if not stop:
        return []
    left = ", ".join(f"`{name}`" for name in stop["not_measured"]) or "no further suite"
    load = (" and the load test (the candidate's, and a cached baseline's)"
            if stop["load_not_measured"] else "")
    failed = "; ".join(f"`{gate}` ({evidence})"
                       for gate, evidence in zip(stop["gates"], stop["evidence"], strict=True))
    return [f"**Stopped early** after `{stop['after']}`: {failed} failed past doubt "
            f"({stop['level']}). Not measured: {left}{load}. Any failed gate rejects, so "
            "nothing left out could have changed the decision; `--measure-all` measures "
            "everything (docs/gates.md, \"Stopping early\").", ""]


def served_dense_lines(dense: ServedDenseJson | None) -> list[str]:
    """What ran, in one paragraph, where the candidate's weights were served dense."""
    if not dense:
        return []
    fmt = dense["format"]
    return [f"**Served dense: quality is {fmt}'s own, speed and memory could not be measured "
            f"here.** {fmt} has no kernel on this device ({dense['why']}); "
            f"`{dense['candidate']}`'s {fmt} weights were served dequantised, in the "
            f"baseline's dtype. Quality, safety, structured output and fidelity are its own; "
            "its latency, throughput and memory gates are not measured, so this decision "
            f"cannot promote on them (judge them on a device with a {fmt} kernel; "
            "docs/candidates.md). On every gate this device can judge, it is "
            f"**{dense.get('judged_here', 'not recorded').upper()}**.", ""]


def gate_mark(g: GateOutcome) -> str:
    return MARK[g.status] + (" (informational)" if g.informational else "") + (
        f" · baseline {MARK[g.baseline_status]}" if g.baseline_status not in (None, "pass")
        else "")


def policy_lines(policy: PolicySection) -> list[str]:
    if not policy:
        return []
    holm = policy["multiple_comparisons"] == "holm"
    tests = policy.get("tests", policy["paired_tests"])
    lines = ["", f"Policy `{policy['path']}` (sha256 {policy['sha256'][:12]}): "
             f"{policy['gates_judged']} gates judged, {tests} of them tests (paired "
             f"comparisons and floors) at one-sided α = {policy['alpha_one_sided']:.3g} each"
             + (", their fails Holm-adjusted" if holm else "") + ". For a candidate "
             "acceptable in truth, the chance that some test rejects it anyway is at most "
             f"{policy['family_false_fail_bound']:.1%}"
             + ("" if holm else "; Holm's adjustment (multiple_comparisons: holm) holds it at α")
             + "; an inconclusive gate " + ("holds the release." if policy["inconclusive_blocks"]
                                            else "is reported and does not block.")]
    if policy.get("informational"):
        lines += ["", "Informational, not counted in the decision: "
                  + ", ".join(f"`{g}`" for g in policy["informational"]) + "."]
    coverage = policy.get("coverage") or {}
    if coverage:
        lines += ["", "| suite | judged by |", "|---|---|",
                  *[f"| {suite} | {how} |" for suite, how in coverage.items()]]
    return lines


def policy_defect(policy: PolicySection | dict) -> str:
    """The headline when the baseline itself misses absolute gates: then no candidate of
    this model can pass, whatever it is, and the policy (not the candidate) decided."""
    misses = policy.get("baseline_misses") or []
    unproven = policy.get("baseline_unproven") or []
    parts = []
    if misses:
        parts.append("no candidate of this model can pass this policy: "
                     + ", ".join(f"`{g}`" for g in misses) + " — the baseline misses them")
    if unproven:
        parts.append("the baseline itself cannot be shown to meet "
                     + ", ".join(f"`{g}`" for g in unproven) + " at this number of items")
    return "; ".join(parts)


def looks_line(policy: PolicySection | dict) -> str:
    """How many looks the run took at its items and at what level (gate/looks.py); empty
    for a run that could look only once (the policy's level whole)."""
    looks = policy.get("looks") or {}
    if looks.get("planned", 1) < 2:
        return ""
    level = (f"each look judged at confidence {looks['confidence_per_look']:g}, half the "
             f"policy's α = {1 - looks['policy_confidence']:.3g} (Bonferroni over two looks), "
             "so the chance that a candidate worse than a margin is promoted at either "
             f"look stays at most {(1 - looks['policy_confidence']) / 2:.2%}")
    first = looks.get("first_look")
    if first is None and looks.get("skipped"):
        return (f"Judged as the first of two possible looks (the {looks['profiles'][0]} "
                "sample): a second look at every item was due, and not taken: "
                f"{looks['skipped']}; {level}")
    if first is None:
        return (f"Judged as the first of two possible looks (the {looks['profiles'][0]} "
                "sample): every item is measured next only when it is inconclusive with no "
                f"gate failed and more items could decide an open gate; {level}")
    gates = ", ".join(f"`{g}`" for g in first["open_gates"][:6])
    more = f" and {len(first['open_gates']) - 6} more" if len(first["open_gates"]) > 6 else ""
    return (f"Two looks: the {first['profile']} sample was {first['decision']} with no gate "
            f"failed, {len(first['open_gates'])} gate(s) open that more items could decide "
            f"({gates}{more}); every item was then measured (profile full) and decided "
            f"this record; {level}. The first look: `{first['folder']}/decision.md`")


def undersized_headline(gates: list[GateOutcome], every_item: bool = False) -> str:
    """When nothing failed and the release is held by paired gates on which the candidate
    changed more answers than their items can pass with no loss (evidence churn above
    tolerable_churn, gate.paired.evidence_strength): the sizes decided, and how far off
    they are (docs/gates.md, "Can a good candidate pass?"). Empty otherwise."""
    counted = [g for g in gates if not g.informational]
    if any(g.status == "fail" for g in counted):
        return ""
    short = sorted((g for g in counted if g.status == "inconclusive"
                    and g.evidence.get("churn", 0.0) > g.evidence.get("tolerable_churn", 1.0)),
                   key=lambda g: g.evidence["tolerable_churn"] / g.evidence["churn"])
    if not short:
        return ""
    worst = "; ".join(f"`{g.gate}` changed {g.evidence['churn']:.1%} of {g.evidence['n']}, "
                      f"which pass at most {g.evidence['tolerable_churn']:.1%}"
                      for g in short[:3])
    return (f"Inconclusive at these sizes, not rejected: on {len(short)} gate(s) the "
            "candidate changed more answers, as many lost as gained or near it, than their "
            f"items can pass with no loss ({worst}); more items decide them ("
            + ("larger suites: every item was measured" if every_item
               else "--profile full, or larger suites")
            + "), looser margins would only hide it")


def headlines(policy: PolicySection | dict, gates: list[GateOutcome]) -> list[tuple[str, str]]:
    """What decision.md, the CI summary and the console say before the gates, each with
    its kind (defect, undersized, looks), in that order: the policy's defect first."""
    every_item = ((policy.get("looks") or {}).get("profiles") or [""])[-1] == "full"
    texts = [("defect", policy_defect(policy).capitalize()),
             ("undersized", undersized_headline(gates, every_item)),
             ("looks", looks_line(policy))]
    return [(kind, text + ".") for kind, text in texts if text]
