"""A traffic request's answers held against each other with no reference
(suites/scorers/answer_agreement.py, issue 49 step 2): what a good candidate keeps, and
that an empty, looping, garbage or off-topic answer gains nothing on any measure."""

from __future__ import annotations

import pytest

from workbench.suites.scorers.answer_agreement import chrf, measure_answer, normalise

PROMPT = "Explain in two sentences why the sky looks blue during the day."
BASELINE = ("Sunlight is scattered by the molecules of the air, and blue light, with its "
            "shorter wavelength, is scattered much more than red. So the light reaching us "
            "from every part of the sky is mostly blue.")
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_the_baseline_agrees_with_itself_and_a_close_paraphrase_scores_high() -> None:
    same = measure_answer(BASELINE, BASELINE, PROMPT)
    assert same.exact and same.chrf == 1.0 and same.length_ratio == 1.0
    assert same.healthy and not same.refused and same.schema_valid is None
    close = measure_answer(BASELINE.replace("much more", "far more").upper() + "  ",
                           BASELINE, PROMPT)
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
    good = measure_answer(BASELINE, BASELINE, PROMPT)
    bad = measure_answer(answer, BASELINE, PROMPT)
    assert not bad.exact, why
    assert bad.chrf < 0.5 < good.chrf, (why, bad.chrf)
    assert abs((bad.length_ratio or 0) - 1) > 0.2, why
    if why in ("empty", "looping", "garbage"):
        assert not bad.healthy and why in bad.health_reason


def test_a_refusal_and_the_schema_are_seen() -> None:
    refused = measure_answer("I'm sorry, but I can't help with that.", BASELINE, PROMPT)
    assert refused.refused and refused.chrf < 0.3
    ok = measure_answer('{"city": "Lyon"}', '{"city": "Lyon"}', "Which city?", SCHEMA)
    wrong = measure_answer('{"town": "Lyon"}', '{"city": "Lyon"}', "Which city?", SCHEMA)
    prose = measure_answer("Lyon, I think.", '{"city": "Lyon"}', "Which city?", SCHEMA)
    assert ok.schema_valid and ok.exact
    assert wrong.schema_valid is False and prose.schema_valid is False


def test_chrf_is_sacrebleus_and_two_empty_answers_agree() -> None:
    from sacrebleu.metrics import CHRF

    hyp, ref = "the cat sat on the mat", "a cat sat on a mat"
    assert chrf(hyp, ref) == pytest.approx(CHRF().sentence_score(hyp, [ref]).score / 100)
    assert chrf("", "") == 1.0 and chrf("", ref) == 0.0
    assert measure_answer("", "", PROMPT).length_ratio is None
