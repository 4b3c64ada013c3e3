"""A team's traffic file read as requests (suites/traffic.py, issue 49 step 1): the three
line forms, segments, per-request parameters, credential-shaped strings found, and every
bad file refused naming the line and the field, never the prompt's text."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from workbench.mechanisms.errors import InputError
from workbench.suites.traffic import read_traffic, redact_secrets, secret_kinds

PROMPT = "Summarise our refund policy for order 77-XK in one line"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def write(tmp_path: Path, rows: list) -> Path:
    path = tmp_path / "traffic.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_items_request_bodies_and_batch_lines_read_alike(tmp_path: Path) -> None:
    path = write(tmp_path, [
        {"id": "a1", "prompt": PROMPT, "segments": {"task": "support", "lang": "en"}},
        {"model": "gpt-x", "messages": [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Extract the name"}],
         "max_completion_tokens": 40, "temperature": 0.7, "n": 3,
         "response_format": {"type": "json_schema", "json_schema": {"name": "p",
                                                                    "schema": SCHEMA}},
         "metadata": {"task": "extraction", "lang": "de"}, "timestamp": "2026-12-01T10:00:00Z"},
        {"custom_id": "batch-7", "method": "POST", "url": "/v1/chat/completions",
         "body": {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                  "tools": [{"type": "function", "function": {"name": "lookup",
                                                              "parameters": SCHEMA}}],
                  "metadata": {"task": "tools", "lang": "en"}}, "timestamp": 1764583200.5}])
    traffic = read_traffic(path)
    first, second, third = traffic.requests
    assert [r.id for r in traffic.requests] == ["a1", "line-2", "batch-7"]
    assert first.messages == ({"role": "user", "content": PROMPT},) and not first.sampled
    assert second.max_tokens == 40 and second.n == 3 and second.sampled
    assert second.schema == SCHEMA
    assert second.timestamp == datetime(2026, 12, 1, 10, tzinfo=timezone.utc).timestamp()
    assert third.tools[0]["function"]["name"] == "lookup" and third.schema is None
    assert third.timestamp == 1764583200.5
    assert traffic.segment_keys == ("task", "lang")
    assert traffic.segments() == {"task": {"support": 1, "extraction": 1, "tools": 1},
                                  "lang": {"en": 2, "de": 1}}
    # the digest is of what the models receive: the same request elsewhere, the same digest
    again = read_traffic(write(tmp_path, [{"messages": [{"role": "user", "content": PROMPT}],
                                           "segments": {"task": "x"}}]))
    assert again.requests[0].digest == first.digest and again.digest != traffic.digest


@pytest.mark.parametrize(("rows", "expected"), [
    ([], "no requests"),
    (["{not json"], "line 1: the line: not JSON"),
    ([{"segments": {"task": "a"}}], "line 1: messages: missing"),
    ([{"messages": [{"role": "robot", "content": "x"}]}], "line 1: messages[0].role"),
    ([{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}],
     "line 1: messages[1]: the last turn is the assistant's"),
    ([{"prompt": "a", "segments": {"lang": "en"}}, {"prompt": "b"}],
     "line 2: segments: no 'lang', which line 1 has"),
    ([{"prompt": "a", "response_format": {"type": "json_schema",
                                          "json_schema": {"schema": {"type": "objekt"}}}}],
     "line 1: response_format.json_schema.schema: not a valid JSON Schema"),
    ([{"prompt": "a", "tools": [{"type": "function", "function": {}}]}], "line 1: tools[0]"),
    ([{"prompt": "a", "max_tokens": 0}], "line 1: max_tokens: a whole number of at least 1"),
    ([{"prompt": "a", "temperature": 3}], "line 1: temperature: a number from 0 to 2"),
    ([{"prompt": "a", "n": 0}], "line 1: n: a whole number from 1 to 16"),
    ([{"id": "x", "prompt": "a"}, {"id": "x", "prompt": "b"}], "line 2: id: the same as line 1's"),
    ([{"prompt": "a", "timestamp": "yesterday"}], "line 1: timestamp"),
])
def test_a_bad_file_names_its_line_and_field(tmp_path: Path, rows: list, expected: str) -> None:
    path = write(tmp_path, rows) if rows else tmp_path / "empty.jsonl"
    if not rows:
        path.write_text("\n")
    with pytest.raises(InputError) as err:
        read_traffic(path)
    assert expected in str(err.value) and str(path) in str(err.value)


def test_every_problem_is_reported_and_no_prompt_is_quoted(tmp_path: Path) -> None:
    secret = "sk-proj-" + "A1b2C3d4" * 4
    path = write(tmp_path, [{"prompt": f"{PROMPT} key {secret}", "max_tokens": -1},
                            {"messages": [{"role": "user", "content": PROMPT}], "n": 99}])
    with pytest.raises(InputError) as err:
        read_traffic(path)
    text = "\n".join(err.value.problems)
    assert len(err.value.problems) == 2 and "line 1: max_tokens" in text and "line 2: n" in text
    assert PROMPT not in text and secret not in text


def test_credential_shaped_strings_are_found_and_can_be_redacted(tmp_path: Path) -> None:
    keys = {"openai-key": "sk-" + "x" * 40, "aws-access-key-id": "AKIA" + "ABCDEFGHIJKLMNOP",
            "github-token": "ghp_" + "a" * 36, "slack-token": "xoxb-1234567890-abcdef",
            "bearer-token": "Bearer " + "t" * 32}
    for kind, key in keys.items():
        assert secret_kinds(f"use {key} please") == [kind]
        assert redact_secrets(f"use {key} please") == f"use [{kind}] please"
    assert secret_kinds("a skeleton key, sk-short, AKIA123") == []
    traffic = read_traffic(write(tmp_path, [{"prompt": f"my key is {keys['openai-key']}"},
                                            {"prompt": "nothing here"}]))
    assert [r.secrets for r in traffic.requests] == [("openai-key",), ()]


def test_what_a_log_leaves_null_or_odd_is_read_or_named_without_its_value(
        tmp_path: Path) -> None:
    """A logged null is an absent field; a json_schema that is no object, a $ref to
    nowhere, a boolean temperature and a number past the digit limit are problems; a
    wrong field's value is named by its type, never quoted (it may be a prompt)."""
    traffic = read_traffic(write(tmp_path, [{"prompt": "a", "max_completion_tokens": None,
                                             "max_tokens": 40, "n": None, "tools": None}]))
    assert traffic.requests[0].max_tokens == 40 and traffic.requests[0].n == 1
    bad = [{"prompt": "a", "response_format": {"type": "json_schema", "json_schema": "x"}},
           {"prompt": "b", "response_format": {"type": "json_schema", "json_schema": {
               "schema": {"type": "object", "properties": {"p": {"$ref": "#/$defs/none"}}}}}},
           {"prompt": "c", "temperature": True},
           {"prompt": "d", "max_tokens": PROMPT},
           '{"prompt": "e", "max_tokens": ' + "9" * 5000 + "}"]
    with pytest.raises(InputError) as err:
        read_traffic(write(tmp_path, bad))
    text = "\n".join(err.value.problems)
    assert "line 1: response_format.json_schema.schema: missing or not a JSON object" in text
    assert "line 2: response_format.json_schema.schema: a $ref it cannot resolve" in text
    assert "line 3: temperature: a number from 0 to 2, not true/false" in text
    assert "line 4: max_tokens: a whole number of at least 1, not text" in text
    assert "line 5: the line: not JSON this reader takes" in text
    assert PROMPT not in text
    good_ref = {"type": "object", "$defs": {"c": {"type": "string"}},
                "properties": {"city": {"$ref": "#/$defs/c"}}}
    ok = read_traffic(write(tmp_path, [{"prompt": "a", "response_format": {
        "type": "json_schema", "json_schema": {"schema": good_ref}}}]))
    assert ok.requests[0].schema == good_ref


def test_a_credential_in_an_id_or_a_label_is_found_too(tmp_path: Path) -> None:
    key = "ghp_" + "b" * 36
    traffic = read_traffic(write(tmp_path, [{"id": f"req-{key}", "prompt": "a",
                                             "segments": {"team": "x"}},
                                            {"prompt": "b", "segments": {"team": key}}]))
    assert [r.secrets for r in traffic.requests] == [("github-token",), ("github-token",)]
