import json
from pathlib import Path

import pytest

from workbench.errors import InputError
from workbench.evaluate.runner import score_response
from workbench.evaluate.suites import load_suite

SPEC = """name: tiny
version: "1"
kind: quality
prompt_template: "What is {a} + {b}?"
max_tokens: 8
"""


def make_suite(root: Path, rows: list[dict] | str, spec: str = SPEC, licence: bool = True) -> Path:
    folder = root / "tiny"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "suite.yaml").write_text(spec)
    data = rows if isinstance(rows, str) else "".join(json.dumps(r) + "\n" for r in rows)
    (folder / "items.jsonl").write_text(data)
    (folder / "SOURCE.md").write_text("test data")
    if licence:
        (folder / "LICENSE").write_text("CC0")
    return folder


def test_valid_suite_renders_prompts_and_keeps_slices(tmp_path: Path) -> None:
    folder = make_suite(tmp_path, [{"id": "x1", "a": 2, "b": 3, "answer": 5, "slices": ["s"]}])
    suite = load_suite(str(folder))
    assert suite.items[0].prompt == "What is 2 + 3?"
    assert suite.items[0].answer == "5" and suite.items[0].slices == ("s",)
    assert len(suite.digest) == 64


def test_every_item_problem_is_reported_with_its_line(tmp_path: Path) -> None:
    rows = (json.dumps({"a": 1, "b": 2, "answer": 3}) + "\n"  # no id
            + json.dumps({"id": "k", "a": 1, "answer": 3}) + "\n"  # template field b missing
            + "{not json\n")
    folder = make_suite(tmp_path, rows)
    with pytest.raises(InputError) as err:
        load_suite(str(folder))
    problems = err.value.problems
    assert any("items.jsonl:1: missing field(s) id" in p for p in problems)
    assert any("items.jsonl:2: missing field(s) b" in p for p in problems)
    assert any("items.jsonl:3: not valid JSON" in p for p in problems)


def test_duplicate_ids_are_rejected(tmp_path: Path) -> None:
    row = {"id": "same", "a": 1, "b": 2, "answer": 3}
    with pytest.raises(InputError, match="items.jsonl:2: duplicate id 'same'"):
        load_suite(str(make_suite(tmp_path, [row, row])))


def test_missing_licence_is_rejected(tmp_path: Path) -> None:
    folder = make_suite(tmp_path, [{"id": "a", "a": 1, "b": 2, "answer": 3}], licence=False)
    with pytest.raises(InputError, match="missing LICENSE file"):
        load_suite(str(folder))


def test_unknown_kind_names_the_key(tmp_path: Path) -> None:
    folder = make_suite(tmp_path, [{"id": "a", "a": 1, "b": 2, "answer": 3}],
                        spec=SPEC.replace("kind: quality", "kind: vibes"))
    with pytest.raises(InputError, match=r"suite.yaml: kind: .*'quality'.*got 'vibes'"):
        load_suite(str(folder))


def test_unknown_suite_lists_shipped_ones() -> None:
    with pytest.raises(InputError, match="suite 'nope' not found; shipped suites: .*arithmetic"):
        load_suite("nope")


@pytest.mark.parametrize("response,answer,expected", [
    ("12", "12", 1.0),
    ("7 + 5 = 12.", "12", 1.0),
    ("The answer is 1,234", "1234", 1.0),
    ("13", "12", 0.0),
    ("twelve", "12", 0.0),
    ("", "12", 0.0),
])
def test_numeric_scoring_takes_the_final_number(response: str, answer: str,
                                                expected: float) -> None:
    assert score_response("numeric", response, answer) == expected


FIDELITY_SPEC = """name: tiny
version: "1"
kind: fidelity
prompt_template: "{text}"
scoring: logprobs
"""


def test_fidelity_suite_needs_no_answer_but_must_score_logprobs(tmp_path: Path) -> None:
    folder = make_suite(tmp_path, [{"id": "t1", "text": "Once upon", "slices": ["prose"]}],
                        spec=FIDELITY_SPEC)
    suite = load_suite(str(folder))
    assert suite.spec.kind == "fidelity" and suite.items[0].prompt == "Once upon"
    make_suite(tmp_path, [{"id": "t1", "text": "x"}],
               spec=FIDELITY_SPEC.replace("scoring: logprobs", "scoring: numeric"))
    with pytest.raises(InputError, match="kind 'fidelity' goes with scoring 'logprobs'"):
        load_suite(str(folder))
    make_suite(tmp_path, [{"id": "t1", "text": "x"}],
               spec=FIDELITY_SPEC.replace("scoring: logprobs", "scoring: logprobs\ntop_k: 50"))
    with pytest.raises(InputError, match="top_k"):
        load_suite(str(folder))
