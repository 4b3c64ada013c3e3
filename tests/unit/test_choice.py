import json
from pathlib import Path

import pytest

from workbench.mechanisms.errors import InputError
from workbench.suites.definition import load_suite
from workbench.suites.results import ItemResult, summarise
from workbench.suites.scorers.choice import expected_calibration_error, softmax

SPEC = """name: mc
version: "1"
kind: quality
prompt_template: "Q: {question}\\nAnswer:"
scoring: choice
"""


def make(root: Path, rows: list[dict]) -> Path:
    folder = root / "mc"
    folder.mkdir(exist_ok=True)
    (folder / "suite.yaml").write_text(SPEC)
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "SOURCE.md").write_text("test")
    (folder / "LICENSE").write_text("CC0")
    return folder


def test_ece_is_zero_when_confidence_matches_accuracy_and_grows_with_overconfidence() -> None:
    assert expected_calibration_error([0.75] * 4, [1, 1, 1, 0]) == pytest.approx(0.0)
    assert expected_calibration_error([0.95] * 4, [1, 1, 0, 0]) == pytest.approx(0.45)
    # two bins: 0.25 off in one, exact in the other, half the items each
    assert expected_calibration_error([0.55, 0.55, 0.95, 0.95], [1, 1, 1, 1]) == \
        pytest.approx(0.5 * 0.45 + 0.5 * 0.05)


def test_softmax_is_stable_and_normalised() -> None:
    probs = softmax([-1000.0, -1001.0])
    assert sum(probs) == pytest.approx(1.0) and probs[0] > probs[1]


def test_choice_items_need_choices_and_an_answer_index(tmp_path: Path) -> None:
    ok = make(tmp_path, [{"id": "a", "question": "2+2?", "choices": [" 3", " 4"], "answer": 1}])
    assert load_suite(str(ok)).items[0].choices == (" 3", " 4")
    make(tmp_path, [{"id": "a", "question": "q", "choices": [" x"], "answer": 0},
                    {"id": "b", "question": "q", "choices": [" x", " y"], "answer": 2}])
    with pytest.raises(InputError) as err:
        load_suite(str(ok))
    assert any("items.jsonl:1: 'choices' must list two or more" in p for p in err.value.problems)
    assert any("items.jsonl:2: 'answer' must be the index" in p for p in err.value.problems)


def test_choice_summary_reports_accuracy_and_calibration(tmp_path: Path) -> None:
    suite = load_suite(str(make(tmp_path, [{"id": "a", "question": "q", "choices": [" x", " y"],
                                            "answer": 0}])))
    items = [ItemResult("a", ("s",), "h", " x", 1.0, 0.1, 0, (0.9, 0.1)),
             ItemResult("b", ("s",), "h", " y", 0.0, 0.1, 0, (0.2, 0.8))]
    r = summarise(suite, items, tmp_path / "items.jsonl")
    assert r.accuracy == 0.5 and r.slices["s"]["accuracy"] == 0.5
    assert r.metrics["mean_confidence"] == pytest.approx(0.85)
    assert r.metrics["ece"] == pytest.approx(0.5 * 0.1 + 0.5 * 0.8)


def test_shipped_multiple_choice_suites_load() -> None:
    for name, n_choices in (("mmlu-sample", 4), ("commonsenseqa", 5), ("boolq", 2),
                            ("truthfulness", 2)):
        suite = load_suite(name)
        assert all(len(i.choices) == n_choices for i in suite.items)
    # the cloze suites continue the question with each option's own text, not its letter
    csqa = load_suite("commonsenseqa")
    first = csqa.items[0]
    assert first.choices[first.answer and int(first.answer)] == " bank"
    assert "A. " not in first.prompt and first.prompt.endswith("Answer:")
    assert csqa.spec.choice_normalise == "characters"


def test_acc_norm_divides_by_the_texts_characters_as_lm_eval_does() -> None:
    from workbench.suites.scorers.choice import pick_choice

    # the longer text has the lower sum but the higher log-likelihood per character
    scores, choices = [-6.0, -10.0], (" cat", " elephants")
    assert pick_choice(scores, choices, "none")[0] == 0
    pick, probs = pick_choice(scores, choices, "characters")  # -2.0 vs -1.11 per char
    assert pick == 1 and probs[1] > probs[0] and sum(probs) == pytest.approx(1.0)
