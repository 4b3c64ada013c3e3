import pytest

from workbench.suites.scorers.structured import extract_json, score_json

SCHEMA = {"type": "object", "properties": {"base": {"type": "integer"},
                                           "unit": {"type": "string"}},
          "required": ["base"], "additionalProperties": False}
EXPECTED = {"base": [10], "unit": ["units", ""]}


def test_exact_arguments_score_one_with_every_check() -> None:
    score, checks = score_json('{"base": 10}', SCHEMA, EXPECTED)
    assert score == 1.0
    assert checks == {"parses": 1.0, "schema_valid": 1.0, "fields_correct": 1.0}


def test_wrong_value_is_partly_correct_and_schema_valid() -> None:
    score, checks = score_json('{"base": 12, "unit": "Units"}', SCHEMA, EXPECTED)
    assert score == 0.0 and checks["schema_valid"] == 1.0 and checks["fields_correct"] == 0.5


def test_unknown_argument_fails_schema_and_exactness() -> None:
    score, checks = score_json('{"base": 10, "colour": "red"}', SCHEMA, EXPECTED)
    assert score == 0.0 and checks["schema_valid"] == 0.0 and checks["fields_correct"] == 1.0


def test_text_that_does_not_parse_scores_nothing() -> None:
    score, checks = score_json('The arguments are {"base": 10}', SCHEMA, EXPECTED)
    assert score == 0.0 and checks == {"parses": 0.0, "schema_valid": 0.0,
                                       "fields_correct": 0.0}


@pytest.mark.parametrize("text", ['```json\n{"a": 1}\n```', '  {"a": 1}\n', '```\n{"a": 1}```'])
def test_one_code_fence_or_whitespace_is_accepted(text: str) -> None:
    assert extract_json(text) == (True, {"a": 1})


def test_numbers_compare_by_value_and_strings_ignore_case() -> None:
    schema = {"type": "object"}
    assert score_json('{"x": 2.0, "s": " Paris "}', schema,
                      {"x": [2], "s": ["paris"]})[0] == 1.0
    assert score_json('{"x": true}', schema, {"x": [1]})[0] == 0.0
