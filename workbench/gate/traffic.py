"""A traffic suite's two sides made comparable item by item (issue 49, step 2's judge half;
not yet wired): with no reference answer, the candidate's answer to each request is held
against the baseline's (scorers/answer_agreement.agreement), and both sides get the same
per-item checks, so that the paired gates of every other suite, with their slices (the
traffic's segments, `key:label`) and Holm's adjustment, judge them unchanged.

Per item, on both sides:
- `score` and `agreement_chrf`: chrF against the baseline's answer (the baseline's own is 1:
  its answer agrees with itself), so the paired delta is the candidate's loss of agreement;
- `agreement_exact`: 1 where the answers are equal after normalisation (the baseline's 1);
- `length_kept`: 1 where the answer is between half and twice the baseline's length
  (the baseline's 1; an empty baseline answer keeps the candidate's only where it is empty
  too), so that a candidate that runs on, or stops short, loses here whatever it says;
- the runner's own checks of each side (healthy, refused, schema_valid) carried as they
  were measured: health and schema validity are paired as in every generating suite; a
  refusal rate that moves either way is a change (the gate's, two-sided).
A request one side did not answer is left out of both (paired on what both answered).
"""

from __future__ import annotations

from dataclasses import replace

from workbench.suites.results import ItemResult, SuiteResult
from workbench.suites.scorers.answer_agreement import agreement

__all__ = ["AGREEMENT_CHECKS", "against_baseline", "length_kept"]

AGREEMENT_CHECKS = ("agreement_chrf", "agreement_exact", "length_kept")
LENGTH_BAND = (0.5, 2.0)  # a candidate's answer within this share of the baseline's length


def length_kept(ratio: float | None, answer: str) -> bool:
    """Whether the answer's length is the baseline's within LENGTH_BAND (ratio None: the
    baseline's answer was empty, which only an empty answer keeps)."""
    if ratio is None:
        return not answer.strip()
    return LENGTH_BAND[0] <= ratio <= LENGTH_BAND[1]


def _candidate_item(item: ItemResult, base: ItemResult) -> ItemResult:
    held = agreement(item.response, base.response)
    checks = {**item.checks, "agreement_chrf": held.chrf,
              "agreement_exact": float(held.exact),
              "length_kept": float(length_kept(held.length_ratio, item.response))}
    return replace(item, score=held.chrf, checks=checks)


def _baseline_item(item: ItemResult) -> ItemResult:
    checks = {**item.checks, "agreement_chrf": 1.0, "agreement_exact": 1.0, "length_kept": 1.0}
    return replace(item, score=1.0, checks=checks)


def against_baseline(base: SuiteResult, cand: SuiteResult
                     ) -> tuple[SuiteResult, SuiteResult]:
    """Both sides of one traffic suite, each item scored by its agreement with the
    baseline's answer, on the requests both answered."""
    by_id = {i.id: i for i in base.items}
    both = [i for i in cand.items if i.id in by_id]
    base_items = [_baseline_item(by_id[i.id]) for i in both]
    cand_items = [_candidate_item(i, by_id[i.id]) for i in both]
    return _summed(base, base_items), _summed(cand, cand_items)


def _summed(result: SuiteResult, items: list[ItemResult]) -> SuiteResult:
    """The result over these items: its accuracy (the mean agreement) and each segment's."""
    slices: dict[str, dict[str, float]] = {}
    for name in sorted({s for i in items for s in i.slices}):
        members = [i.score for i in items if name in i.slices]
        slices[name] = {"n": len(members), "accuracy": sum(members) / len(members)}
    accuracy = sum(i.score for i in items) / len(items) if items else 0.0
    return replace(result, items=items, n=len(items), accuracy=accuracy, slices=slices)
