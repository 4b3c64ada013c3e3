"""What `validate` says about the policy before a run spends time: how each suite the
config runs is judged, and, from the cached baseline when there is one, which suites the
baseline answers alike on every item (they cannot see a change) and which gates its score
leaves nothing to lose (they cannot fail), and how much answer churn each paired gate
can pass at the profile's sizes: docs/gates.md."""

from __future__ import annotations

from collections.abc import Mapping

from workbench.config.gate_policy import GatePolicy
from workbench.gate.looks import planned_looks
from workbench.gate.paired import constant_answers, nothing_to_lose, tolerable_churn
from workbench.measure.measurement import MEASUREMENT_FILE, Measurement
from workbench.measure.pair import baseline_entry
from workbench.mechanisms.files import read_json
from workbench.plan.plan import Plan
from workbench.suites.definition import Suite

__all__ = ["coverage_lines"]


def _cached_baseline(p: Plan) -> Measurement | None:
    """The cached baseline of this plan, read only (validate writes and drops nothing; a
    damaged entry is evaluate's to drop)."""
    file = baseline_entry(p) / MEASUREMENT_FILE
    try:
        return Measurement.from_dict(read_json(file)) if file.is_file() else None
    except (ValueError, KeyError, TypeError):
        return None


def coverage_lines(policy: GatePolicy, suites: list[Suite], p: Plan | None = None,
                   sizes: Mapping[str, int] | None = None) -> list[str]:
    """One line per suite the config runs; sizes (run name -> items the profile runs)
    add what each paired gate can pass."""
    kinds = {run: s.spec.kind for s in suites for run, _ in s.spec.runs()}
    baseline = _cached_baseline(p) if p is not None and not p.endpoint_roles else None
    paired = policy.paired(kinds)
    margins = {g.suite: g.max_drop for _, g in paired if g.metric == "score"}
    any_metric = {g.suite: g.max_drop for _, g in paired}  # a schema_valid rate churns too
    every = {run: len(s.sample("full", 0)) for s in suites for run, _ in s.spec.runs()}
    growing = {run for run, n in (sizes or {}).items() if every.get(run, n) > n}
    looks = planned_looks(policy.second_look, growing)
    level = policy.for_look(looks).confidence
    lines = []
    for suite, how in policy.gated_by(kinds).items():
        result = baseline.suites.get(suite) if baseline else None
        blind = result is not None and result.kind != "fidelity" and constant_answers(result)
        note = (" — the cached baseline gives one answer to every item: this suite cannot "
                "see a change" if blind else "")
        margin = margins.get(suite)
        # a traffic suite's baseline scores 1 once held against itself (gate/traffic.py)
        if result is not None and margin is not None and result.kind != "traffic" and \
                nothing_to_lose(result.accuracy, margin):
            note += (f" — the cached baseline scores {result.accuracy:.3f}, within its margin "
                     f"{margin}: the gate cannot fail (docs/gates.md)")
        if suite in any_metric and sizes and suite in sizes:
            most = tolerable_churn(sizes[suite], any_metric[suite], level)
            note += (f" · {sizes[suite]} items: passes a candidate with no loss that "
                     f"changes up to {most:.1%} of the answers (80% chance)")
            if suite in growing and looks == 2:
                again = tolerable_churn(every[suite], any_metric[suite], level)
                note += f"; at a second look, {every[suite]} items: up to {again:.1%}"
        lines.append(f"  {suite}: {how}{note}")
    if looks == 2:
        lines.append(f"  (second look: when the sample leaves a gate open and fails none, "
                     f"every item is measured, {sum(every.values()):,} per model instead of "
                     f"{sum((sizes or {}).values()):,}; each look judged at confidence "
                     f"{level:g}: docs/gates.md, 'Two looks')")
    return lines
