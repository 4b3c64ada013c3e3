"""A traffic suite's two sides made comparable (gate/traffic.py, issue 49 step 2): an A/A
loses nothing on any measure in any segment; a broken candidate loses agreement, exactness
and length in every segment and gains nothing on health or refusal; a request one side did
not answer is left out of both."""

from __future__ import annotations

from workbench.gate.paired import Comparisons
from workbench.gate.traffic import against_baseline, length_kept
from workbench.suites.results import ITEM_CHECKS, ItemResult, SuiteResult
from workbench.suites.scorers.answer_agreement import answer_checks

ANSWERS = {
    "r1": ("The order ships in three days; you can track it from your account page.",
           ("task:support", "lang:en")),
    "r2": ('{"name": "Ada Lovelace", "born": 1815}', ("task:extraction", "lang:en")),
    "r3": ("Der Vertrag endet am 31. März, die Kündigungsfrist beträgt drei Monate.",
           ("task:support", "lang:de")),
    "r4": ("def add(a, b):\n    return a + b", ("task:code", "lang:en")),
}


def side(answers: dict[str, str]) -> SuiteResult:
    items = []
    for rid, text in answers.items():
        checks, reason = answer_checks(text, "a request")
        items.append(ItemResult(id=rid, slices=ANSWERS[rid][1], prompt_sha256="h",
                                response=text, score=0.0, latency_s=0.1,
                                completion_tokens=len(text.split()), checks=checks,
                                health=reason))
    return SuiteResult(suite="my-traffic", version="1", digest="d", n=len(items), accuracy=0.0,
                       slices={}, items_file="f", items=items, kind="traffic", generates=True)


BASE = side({rid: text for rid, (text, _) in ANSWERS.items()})


def deltas(base: SuiteResult, cand: SuiteResult, metric: str) -> dict[str, float]:
    b, c = against_baseline(base, cand)
    comparisons = Comparisons(confidence=0.95, resamples=1000, seed=0)
    return {name: row["delta"] for name, row in comparisons.table(b, c, metric).items()}


def test_an_aa_loses_nothing_anywhere() -> None:
    again = side({rid: text for rid, (text, _) in ANSWERS.items()})
    for metric in ("score", "agreement_exact", "length_kept", "healthy", "refused"):
        assert set(deltas(BASE, again, metric).values()) == {0.0}, metric
    b, _ = against_baseline(BASE, again)
    assert b.accuracy == 1.0 and b.slices["lang:de"] == {"n": 1, "accuracy": 1.0}


def test_a_broken_candidate_loses_in_every_segment_and_gains_nothing() -> None:
    for broken in ("", "the the the the " * 40, "zq xv 7#@ kk jjj ppp ## qz zzv ;; xx"):
        cand = side({rid: broken for rid in ANSWERS})
        agree = deltas(BASE, cand, "score")
        assert all(d < -0.5 for d in agree.values()), (broken[:10], agree)
        assert all(d == -1.0 for d in deltas(BASE, cand, "agreement_exact").values())
        if not broken.startswith("zq"):  # garbage may match a length: agreement catches it
            assert all(d == -1.0 for d in deltas(BASE, cand, "length_kept").values())
        assert all(d <= 0 for d in deltas(BASE, cand, "healthy").values())
        assert all(d == 0 for d in deltas(BASE, cand, "refused").values())


def test_a_request_the_candidate_left_unanswered_counts_as_an_empty_answer() -> None:
    """Failing a request gains nothing: it is an empty, unhealthy answer, not a request
    left out; one the baseline did not answer has nothing to be held against."""
    partial = side({rid: text for rid, (text, _) in ANSWERS.items() if rid != "r3"})
    b, c = against_baseline(BASE, partial)
    assert [i.id for i in b.items] == [i.id for i in c.items] == ["r1", "r2", "r3", "r4"]
    lost = c.items[2]
    assert lost.score == 0.0 and lost.checks["healthy"] == 0.0 and lost.response == ""
    assert c.slices["lang:de"] == {"n": 1, "accuracy": 0.0}
    assert c.metrics["health_rate"] == 0.75 and b.metrics["agreement_chrf"] == 1.0
    fewer = side({rid: text for rid, (text, _) in ANSWERS.items() if rid != "r1"})
    b, c = against_baseline(fewer, BASE)
    assert [i.id for i in c.items] == ["r2", "r3", "r4"] and b.n == 3


def test_the_length_band() -> None:
    assert length_kept(1.0, "x") and length_kept(0.5, "x") and length_kept(2.0, "x")
    assert not length_kept(0.49, "x") and not length_kept(2.01, "x")
    assert length_kept(None, "  ") and not length_kept(None, "something")


def test_a_refusal_that_appears_or_disappears_is_lost_agreement_either_way() -> None:
    """refusal_kept: a candidate that starts refusing, and one that stops refusing what the
    baseline refused, both lose; `refused` itself is not a gate's metric (its rise is the
    loss, which a non-inferiority gate cannot hold)."""
    refusing = side({rid: "I'm sorry, but I can't help with that request." for rid in ANSWERS})
    assert all(d == -1.0 for d in deltas(BASE, refusing, "refusal_kept").values())
    assert all(d == -1.0 for d in deltas(refusing, BASE, "refusal_kept").values())
    assert set(deltas(BASE, BASE, "refusal_kept").values()) == {0.0}
    assert "refused" not in ITEM_CHECKS["agreement"]
    assert "judge_no_verdict" not in ITEM_CHECKS["agreement"]


def test_an_unanswered_request_scores_its_worst_on_every_check_the_baseline_has() -> None:
    base = side({rid: text for rid, (text, _) in ANSWERS.items()})
    base.items[1].checks["schema_valid"] = 1.0  # r2 asked for a schema and got one
    partial = side({rid: text for rid, (text, _) in ANSWERS.items() if rid != "r2"})
    _, c = against_baseline(base, partial)
    lost = next(i for i in c.items if i.id == "r2")
    assert lost.checks["schema_valid"] == 0.0 and lost.checks["healthy"] == 0.0
    assert lost.checks["refusal_kept"] == 1.0  # the baseline answered it too: no refusal
