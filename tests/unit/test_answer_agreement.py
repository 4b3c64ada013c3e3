"""A traffic request's answers with no reference (suites/scorers/answer_agreement.py,
issue 49 step 2): what one answer is on its own (health, refusal, schema) and how it agrees
with the baseline's; a good candidate keeps agreement, and an empty, looping, garbage or
off-topic answer gains nothing on any measure."""

from __future__ import annotations

import pytest

from workbench.suites.scorers.answer_agreement import agreement, answer_checks, chrf, normalise

PROMPT = "Explain in two sentences why the sky looks blue during the day."
BASELINE = ("Sunlight is scattered by the molecules of the air, and blue light, with its "
            "shorter wavelength, is scattered much more than red. So the light reaching us "
            "from every part of the sky is mostly blue.")
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_the_baseline_agrees_with_itself_and_a_close_paraphrase_scores_high() -> None:
    same = agreement(BASELINE, BASELINE)
    assert same.exact and same.chrf == 1.0 and same.length_ratio == 1.0
    checks, reason = answer_checks(BASELINE, PROMPT)
    assert checks == {"healthy": 1.0, "truncated": 0.0, "refused": 0.0} and reason == "ok"
    close = agreement(BASELINE.replace("much more", "far more").upper() + "  ", BASELINE)
    assert not close.exact and close.chrf > 0.8
    assert normalise("  Ｐａｒｉｓ\n is  nice") == normalise("paris is NICE")


@pytest.mark.parametrize(("answer", "why"), [
    ("", "empty"),
    ("the sky is blue " * 30, "looping"),
    ("zq xv 7#@ kk jjj ppp ## qz zzv ;; xx vvq kj zq xv 7#@ kk jjj", "garbage"),
    ("Here is a recipe for banana bread: mash three bananas, add flour and bake it.",
     "off-topic"),
])
def test_a_broken_answer_gains_nothing(answer: str, why: str) -> None:
    bad = agreement(answer, BASELINE)
    assert not bad.exact, why
    assert bad.chrf < 0.5 < agreement(BASELINE, BASELINE).chrf, (why, bad.chrf)
    assert abs((bad.length_ratio or 0) - 1) > 0.2, why
    checks, reason = answer_checks(answer, PROMPT)
    if why in ("empty", "looping", "garbage"):
        assert checks["healthy"] == 0.0 and why in reason
    assert checks["refused"] == 0.0  # a broken answer is not counted as a refusal either


def test_a_refusal_and_the_schema_are_seen() -> None:
    refused, _ = answer_checks("I'm sorry, but I can't help with that.", PROMPT)
    assert refused["refused"] == 1.0
    ok, _ = answer_checks('{"city": "Lyon"}', "Which city?", SCHEMA)
    wrong, _ = answer_checks('{"town": "Lyon"}', "Which city?", SCHEMA)
    prose, _ = answer_checks("Lyon, I think.", "Which city?", SCHEMA)
    assert ok["schema_valid"] == 1.0 and wrong["schema_valid"] == prose["schema_valid"] == 0.0
    nowhere = {"type": "object", "properties": {"c": {"$ref": "#/$defs/none"}}}
    assert answer_checks('{"c": 1}', "q", nowhere)[0]["schema_valid"] == 0.0


def test_chrf_is_sacrebleus_and_two_empty_answers_agree() -> None:
    from sacrebleu.metrics import CHRF

    hyp, ref = "the cat sat on the mat", "a cat sat on a mat"
    assert chrf(hyp, ref) == pytest.approx(CHRF().sentence_score(hyp, [ref]).score / 100)
    assert chrf("", "") == 1.0 and chrf("", ref) == 0.0
    assert agreement("", "").length_ratio is None
