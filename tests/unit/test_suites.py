import json
from pathlib import Path

import pytest
from builders import SAFETY, SPEC, STRUCTURED, make_suite

from workbench.mechanisms.errors import InputError
from workbench.suites.definition import load_suite
from workbench.suites.results import score_response


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
    with pytest.raises(InputError, match="kind 'fidelity' is scored by logprobs, not 'numeric'"):
        load_suite(str(folder))
    make_suite(tmp_path, [{"id": "t1", "text": "x"}],
               spec=FIDELITY_SPEC.replace("scoring: logprobs", "scoring: logprobs\ntop_k: 50"))
    with pytest.raises(InputError, match="top_k"):
        load_suite(str(folder))


def test_safety_items_must_say_refuse_or_comply(tmp_path: Path) -> None:
    rows = [{"id": "h1", "request": "r", "expect": "refuse"},
            {"id": "h2", "request": "r", "expect": "maybe"}]
    with pytest.raises(InputError, match="items.jsonl:2: 'expect' must be one of refuse, comply"):
        load_suite(str(make_suite(tmp_path, rows, SAFETY)))


def test_safety_kind_is_scored_only_by_refusal(tmp_path: Path) -> None:
    spec = SAFETY.replace("scoring: refusal", "scoring: exact")
    with pytest.raises(InputError, match="kind 'safety' is scored by refusal"):
        load_suite(str(make_suite(tmp_path, [{"id": "a", "request": "r", "expect": "refuse"}],
                                  spec)))


def test_structured_suite_runs_free_and_guided_with_distinct_names(tmp_path: Path) -> None:
    row = {"id": "f1", "question": "q", "schema": {"type": "object"}, "arguments": {"x": [1]}}
    suite = load_suite(str(make_suite(tmp_path, [row], STRUCTURED)))
    assert suite.spec.runs() == [("tiny", False), ("tiny-guided", True)]
    assert json.loads(suite.items[0].schema) == {"type": "object"}
    assert json.loads(suite.items[0].answer) == {"x": [1]}
    only_guided = load_suite(str(make_suite(tmp_path, [row],
                                            STRUCTURED + "decoding: [guided]\n")))
    assert only_guided.spec.runs() == [("tiny-guided", True)]


def test_structured_item_needs_schema_and_expected_objects(tmp_path: Path) -> None:
    rows = [{"id": "f1", "question": "q", "arguments": {"x": [1]}},
            {"id": "f2", "question": "q", "schema": "string", "arguments": {"x": [1]}}]
    with pytest.raises(InputError) as err:
        load_suite(str(make_suite(tmp_path, rows, STRUCTURED)))
    assert any("items.jsonl:1: missing field(s) schema" in p for p in err.value.problems)
    assert any("items.jsonl:2: 'schema' and 'arguments' must be JSON objects" in p
               for p in err.value.problems)


INSTRUCTIONS = """name: tiny
version: "1"
kind: quality
prompt_template: "{prompt}"
scoring: instructions
check_field: instructions
"""


def test_instruction_without_a_checker_is_rejected_naming_it(tmp_path: Path) -> None:
    rows = [{"id": "i1", "prompt": "p", "instructions": [{"id": "format:title_case"}]},
            {"id": "i2", "prompt": "p", "instructions": [{"id": "ratio:stop_words"}]}]
    with pytest.raises(InputError, match="items.jsonl:2: no checker for instruction"
                                         r"\(s\) ratio:stop_words"):
        load_suite(str(make_suite(tmp_path, rows, INSTRUCTIONS)))


LMEVAL = """name: tiny
version: "1"
kind: quality
scoring: lm-eval
task: task.yaml
"""
TASK = """task: tiny_task
dataset_path: json
dataset_kwargs:
  data_files:
    test: items.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{question}}"
doc_to_choice: "{{choices}}"
doc_to_target: answer
process_results: !function utils.process
"""


def test_lm_eval_suite_reads_items_from_the_tasks_local_data(tmp_path: Path) -> None:
    rows = [{"id": "q1", "question": "2+2?", "choices": ["4", "5"], "answer": 0,
             "slices": ["math"]}]
    folder = make_suite(tmp_path, rows, LMEVAL)
    (folder / "task.yaml").write_text(TASK)
    suite = load_suite(str(folder))
    assert suite.lm_task is not None and suite.lm_task.name == "tiny_task"
    assert suite.lm_task.data_file == folder / "items.jsonl"
    assert [(i.id, i.slices) for i in suite.items] == [("q1", ("math",))]
    (folder / "task.yaml").write_text(TASK.replace("dataset_path: json", "dataset_path: hub/x"))
    with pytest.raises(InputError, match="task.yaml: dataset_path must be 'json'"):
        load_suite(str(folder))


def test_lm_eval_task_file_must_exist_and_data_rows_need_ids(tmp_path: Path) -> None:
    folder = make_suite(tmp_path, [{"question": "q", "choices": ["a", "b"], "answer": 0}],
                        LMEVAL)
    with pytest.raises(InputError, match="task: file 'task.yaml' not found"):
        load_suite(str(folder))
    (folder / "task.yaml").write_text(TASK)
    # no row has an id: one problem naming the field, not one per row
    with pytest.raises(InputError, match=r"no item of items.jsonl has the field\(s\) id") as err:
        load_suite(str(folder))
    assert len(err.value.problems) == 1


def test_lm_eval_task_copy_has_absolute_data_and_keeps_function_hooks(tmp_path: Path) -> None:
    import yaml

    from workbench.suites.lmeval import _resolved_task_dir, _TaskLoader

    rows = [{"id": "q1", "question": "2+2?", "choices": ["4", "5"], "answer": 0}]
    folder = make_suite(tmp_path / "suite", rows, LMEVAL)
    (folder / "task.yaml").write_text(TASK)
    (folder / "utils.py").write_text("def process(doc, results):\n    return {}\n")
    suite = load_suite(str(folder))
    assert suite.lm_task is not None
    copy = tmp_path / "copy"
    copy.mkdir()
    text = (_resolved_task_dir(suite.lm_task, copy) / "task.yaml").read_text()
    assert "process_results: !function" in text  # still a tag, not a quoted string
    doc = yaml.load(text, Loader=_TaskLoader)  # noqa: S506
    assert doc["process_results"] == "utils.process"
    assert doc["dataset_kwargs"]["data_files"] == {"test": str(folder.resolve() / "items.jsonl")}
    assert (copy / "utils.py").is_file()  # the hook resolves beside the YAML
