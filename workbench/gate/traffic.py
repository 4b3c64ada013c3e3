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
- `refusal_kept`: 1 where the candidate refuses exactly where the baseline did (the
  baseline's 1): a refusal that appears or disappears is a change either way, and the
  measure is one a non-inferiority gate can hold (higher is better);
- the runner's own checks of each side (healthy, refused, schema_valid) carried as they
  were measured: health and schema validity are paired as in every generating suite.
A request the baseline answered and the candidate did not counts as an empty answer (it
agrees with nothing and is not healthy), so a candidate gains nothing by failing requests;
one the baseline did not answer has nothing to be held against and is left out.

The baseline's own agreement is 1 by definition for a greedy request on a deterministic
engine. For a sampled one it is its second draw held against its first (the runner draws it
with the next seed), so a candidate's draw is held to what sampling alone changes.
"""

from __future__ import annotations

from dataclasses import replace

from workbench.suites.results import ItemResult, SuiteResult, check_means
from workbench.suites.scorers.answer_agreement import agreement

__all__ = ["AGREEMENT_CHECKS", "against_baseline", "length_kept", "pair_traffic"]

AGREEMENT_CHECKS = ("agreement_chrf", "agreement_exact", "length_kept", "refusal_kept")
LENGTH_BAND = (0.5, 2.0)  # a candidate's answer within this share of the baseline's length


def length_kept(ratio: float | None, answer: str) -> bool:
    """Whether the answer's length is the baseline's within LENGTH_BAND (ratio None: the
    baseline's answer was empty, which only an empty answer keeps)."""
    if ratio is None:
        return not answer.strip()
    return LENGTH_BAND[0] <= ratio <= LENGTH_BAND[1]


def _held(answers: list[str], against: list[str]) -> dict[str, float]:
    """Each agreement measure averaged over a request's draws, the k-th answer held
    against the k-th of `against` (one draw each: that pair's)."""
    pairs = list(zip(answers, against, strict=False))
    held = [(agreement(a, b), a) for a, b in pairs]
    return {"agreement_chrf": sum(h.chrf for h, _ in held) / len(held),
            "agreement_exact": sum(float(h.exact) for h, _ in held) / len(held),
            "length_kept": sum(float(length_kept(h.length_ratio, a)) for h, a in held)
            / len(held)}


def _candidate_item(item: ItemResult, base: ItemResult) -> ItemResult:
    held = _held([item.response, *item.draws], [base.response, *base.draws])
    # a refusal that appears or disappears is a change either way (with n draws, the
    # share of draws refused)
    kept = 1.0 - abs(item.checks.get("refused", 0.0) - base.checks.get("refused", 0.0))
    checks = {**item.checks, **held, "refusal_kept": kept}
    return replace(item, score=held["agreement_chrf"], checks=checks)


def _baseline_item(item: ItemResult) -> ItemResult:
    """The baseline's answer held against itself: 1 on every agreement measure; for a
    sampled request, its redraws held against its draws, so that the candidate's draws
    are held to what sampling alone changes, not to a copy (suites/traffic_ask.py)."""
    if item.redraw is None:
        checks = {**item.checks, "agreement_chrf": 1.0, "agreement_exact": 1.0,
                  "length_kept": 1.0, "refusal_kept": 1.0}
        return replace(item, score=1.0, checks=checks)
    held = _held([item.redraw, *item.redraws], [item.response, *item.draws])
    checks = {**item.checks, **held, "refusal_kept": 1.0}
    return replace(item, score=held["agreement_chrf"], checks=checks)


def _unanswered(base: ItemResult) -> ItemResult:
    """The candidate's item for a request it did not answer: an empty answer, every check
    the baseline's item has at its worst (0: not healthy, no valid schema, no likelihood),
    so that no gate leaves it out."""
    return ItemResult(id=base.id, slices=base.slices, prompt_sha256=base.prompt_sha256,
                      response="", score=0.0, latency_s=0.0, completion_tokens=0,
                      checks={**dict.fromkeys(base.checks, 0.0), "truncated": 0.0},
                      health="empty: no answer")


def against_baseline(base: SuiteResult, cand: SuiteResult
                     ) -> tuple[SuiteResult, SuiteResult]:
    """Both sides of one traffic suite, each item scored by its agreement with the
    baseline's answer, over every request the baseline answered, by id."""
    answered = {i.id: i for i in cand.items}
    ordered = sorted(base.items, key=lambda i: i.id)
    base_items = [_baseline_item(b) for b in ordered]
    cand_items = [_candidate_item(answered.get(b.id) or _unanswered(b), b) for b in ordered]
    if any("judge_as_good" in i.checks for i in cand.items):  # a judge read them
        base_items = [_with_checks(i, JUDGED_BASELINE) for i in base_items]
        cand_items = [i if "judge_as_good" in i.checks else _with_checks(i, NOT_JUDGED)
                      for i in cand_items]
    return _summed(base, base_items), _summed(cand, cand_items)


# the judge's checks (measure/judge.py): the baseline's answer is as good as itself; a
# request the candidate did not answer, or the judge was not asked about, is not
JUDGED_BASELINE = {"judge_as_good": 1.0, "judge_no_verdict": 0.0}
NOT_JUDGED = {"judge_as_good": 0.0, "judge_no_verdict": 1.0}


def _with_checks(item: ItemResult, checks: dict[str, float]) -> ItemResult:
    return replace(item, checks={**item.checks, **checks})


def pair_traffic(base: dict[str, SuiteResult], cand: dict[str, SuiteResult]
                 ) -> tuple[dict[str, SuiteResult], dict[str, SuiteResult]]:
    """Each side's suites with every traffic suite scored against the baseline's answers
    (the others as they are): what the gates, the early stop and the record read. A
    traffic suite the candidate has not answered leaves the baseline's as its own answers
    held against themselves."""
    base, cand = dict(base), dict(cand)
    for name, result in list(base.items()):
        if result.kind != "traffic":
            continue
        base[name], paired = against_baseline(result, cand.get(name) or result)
        if name in cand:
            cand[name] = paired
    return base, cand


def _summed(result: SuiteResult, items: list[ItemResult]) -> SuiteResult:
    """The result over these items: its accuracy (the mean agreement), each segment's, and
    each check's mean (the suite's metrics)."""
    slices: dict[str, dict[str, float]] = {}
    for name in sorted({s for i in items for s in i.slices}):
        members = [i.score for i in items if name in i.slices]
        slices[name] = {"n": len(members), "accuracy": sum(members) / len(members)}
    accuracy = sum(i.score for i in items) / len(items) if items else 0.0
    metrics = check_means(items) if items else {}
    return replace(result, items=items, n=len(items), accuracy=accuracy, slices=slices,
                   metrics=metrics)
