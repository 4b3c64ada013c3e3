"""A load profile that replays a traffic suite (`from_suite`, issue 49 item 4): its
requests derived as `workbench traffic-trace` derives them (the model's own chat template
and tokenizer, the log's arrivals or Poisson ones, the answers' lengths), inside the plan
that validate and evaluate share, and bad values refused naming the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import USER_CACHE
from pydantic import ValidationError
from test_traffic_suite import REQUESTS, traffic_folder

from workbench.config.load import LoadProfile
from workbench.config.run_config import RunConfig
from workbench.loadtest.from_traffic import RequestShape, traffic_trace
from workbench.mechanisms.errors import InputError
from workbench.plan.traffic_load import _token_ids, replayed_requests
from workbench.suites.definition import load_suite

REAL_MODEL = USER_CACHE / "models" / "SmolLM2-135M-Instruct"  # its tokenizer and template


@pytest.fixture()
def tokenizer_model(tmp_path: Path) -> Path:
    if not (REAL_MODEL / "tokenizer.json").is_file():
        pytest.skip("the default model's tokenizer is not set up (scripts/setup-tests.sh)")
    model = tmp_path / "model"
    model.mkdir()
    for f in REAL_MODEL.iterdir():
        if f.suffix in (".json", ".jinja") and f.is_file():
            shutil.copy(f, model / f.name)
    return model


def _cfg(model: Path, profile: dict) -> RunConfig:
    return RunConfig.model_validate({
        "model": {"name": "m", "path": str(model)}, "candidates": {"c": {"recipe": "none"}},
        "calibration": {"files": ["c.jsonl"]}, "engine": {"max_model_len": 2048},
        "suites": ["arithmetic"], "gates": "g.yaml",
        "load": {"profile": "traffic", "profiles": {"traffic": profile}}})


def test_a_traffic_suite_replayed_as_traffic_trace_would_write_it(tokenizer_model: Path,
                                                                   tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    folder = traffic_folder(tmp_path, REQUESTS)
    cfg = _cfg(tokenizer_model, {"from_suite": str(folder), "arrival_rate": 2.0, "seed": 4})
    replayed = replayed_requests(cfg, "traffic", cfg.load.profiles["traffic"])
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_model)
    shapes = [RequestShape(i.id, _token_ids(tokenizer, i.request), i.request.max_tokens,
                           None) for i in load_suite(str(folder)).items if i.request]
    expected = traffic_trace(shapes, 64, None, 2.0, 4).requests
    assert replayed == expected and len(replayed) == len(REQUESTS)
    # each prompt as the engine receives it: the chat template's tokens, not the text's
    assert sorted(r.prompt_tokens for r in replayed) == sorted(len(s.tokens) for s in shapes)
    assert sorted(r.output_tokens for r in replayed) == [40, 64, 64, 64]  # max_tokens
    # the answers' lengths where a run's items file gives them
    answers = tmp_path / "items.jsonl"
    answers.write_text("".join(json.dumps({"id": r["id"], "completion_tokens": 9}) + "\n"
                               for r in REQUESTS))
    cfg = _cfg(tokenizer_model, {"from_suite": str(folder), "arrival_rate": 2.0,
                                 "answers": str(answers)})
    assert {r.output_tokens for r in replayed_requests(cfg, "traffic",
                                                       cfg.load.profiles["traffic"])} == {9}


def test_a_replay_of_what_is_not_a_traffic_suite_names_the_field(tokenizer_model: Path,
                                                                  tmp_path: Path) -> None:
    cfg = _cfg(tokenizer_model, {"from_suite": "arithmetic", "arrival_rate": 1.0})
    with pytest.raises(InputError, match=r"load.profiles.traffic.from_suite: arithmetic is a "):
        replayed_requests(cfg, "traffic", cfg.load.profiles["traffic"])
    cfg = _cfg(tokenizer_model, {"from_suite": "no-such-suite"})
    with pytest.raises(InputError, match=r"load.profiles.traffic.from_suite: suite 'no-such"):
        replayed_requests(cfg, "traffic", cfg.load.profiles["traffic"])
    bad = tmp_path / "items.jsonl"
    bad.write_text("not json\n")
    cfg = _cfg(tokenizer_model, {"from_suite": str(traffic_folder(tmp_path, REQUESTS, "t2")),
                                 "arrival_rate": 1.0, "answers": str(bad)})
    with pytest.raises(InputError, match=r"load.profiles.traffic.answers: .* is not a run's "):
        replayed_requests(cfg, "traffic", cfg.load.profiles["traffic"])
    short = _cfg(tokenizer_model, {"from_suite": str(tmp_path / "t2"), "arrival_rate": 1.0})
    short = short.model_copy(update={"engine": short.engine.model_copy(
        update={"max_model_len": 40})})
    with pytest.raises(InputError, match=r"load.profiles.traffic.from_suite: .*t2, request "
                       r"\d+: .*max_model_len") as err:
        replayed_requests(short, "traffic", short.load.profiles["traffic"])
    assert "workbench-trace-" not in str(err.value)  # no temporary file named
    folder = traffic_folder(tmp_path, REQUESTS)  # no timestamps, and no rate to draw them
    cfg = _cfg(tokenizer_model, {"from_suite": str(folder)})
    with pytest.raises(InputError, match=r"load.profiles.traffic.arrival_rate: 4 of 4 "
                       "requests have no timestamp"):
        replayed_requests(cfg, "traffic", cfg.load.profiles["traffic"])


def test_a_replay_is_one_mode_and_its_fields_need_it() -> None:
    with pytest.raises(ValidationError, match="give exactly one of"):
        LoadProfile(from_suite="t", trace="t.jsonl")
    with pytest.raises(ValidationError, match="arrival_rate: for a traffic suite's replay"):
        LoadProfile(concurrency=[1], arrival_rate=2.0)
    replay = LoadProfile(from_suite="t")
    assert replay.mode == "trace" and replay.requests_per_level is None


def test_validate_counts_a_traffic_request_as_the_engine_receives_it(tokenizer_model: Path,
                                                                      tmp_path: Path) -> None:
    """The context check renders a request's every turn and tool through the model's chat
    template: the prompt it counts is the one transformers' template gives, to the token."""
    from transformers import AutoTokenizer

    from workbench.plan.context import context_problems

    longest = {**REQUESTS[2], "messages": [{"role": "user", "content": "Weather? " * 60}]}
    folder = traffic_folder(tmp_path, [longest])
    suite = load_suite(str(folder))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_model)
    sent = len(_token_ids(tokenizer, suite.items[0].request))
    for limit, refused in ((sent, True), (sent + 1, False)):  # the prompt and one token
        cfg = _cfg(tokenizer_model, {"concurrency": [1]}).model_copy(update={
            "engine": _cfg(tokenizer_model, {"concurrency": [1]}).engine.model_copy(
                update={"max_model_len": limit})})
        problems = context_problems(cfg, [suite])
        assert bool(problems) is refused, (limit, problems)
    assert f"needs {sent + 1} tokens (its turns and tools through the chat template" \
        in context_problems(cfg.model_copy(update={"engine": cfg.engine.model_copy(
            update={"max_model_len": sent})}), [suite])[0]


def test_a_built_in_profile_replays_a_traffic_suite_when_told_to() -> None:
    """`interactive: {from_suite: ...}` replaces the built-in's mode and its request count,
    as naming a trace does."""
    from workbench.config.load import LoadConfig

    load = LoadConfig.model_validate({"profile": "interactive", "profiles": {
        "interactive": {"from_suite": "my-traffic", "arrival_rate": 2.0}}})
    replay = load.profiles["interactive"]
    assert replay.mode == "trace" and replay.concurrency is None
    assert replay.requests_per_level is None  # every request, not the built-in's 256
    assert replay.slo is not None  # the rest of the built-in stays


def test_a_template_that_writes_bos_and_eos_is_counted_as_transformers_counts_it(
        tokenizer_model: Path, tmp_path: Path) -> None:
    """A Llama-2-style template writes BOS once and EOS after each assistant turn: the
    check renders the model's own special tokens and adds none of its own."""
    from transformers import AutoTokenizer

    from workbench.plan.context import context_problems

    (tokenizer_model / "chat_template.jinja").write_text(
        "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}"
        "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}")
    turns = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
             {"role": "user", "content": "Weather? " * 40}]
    suite = load_suite(str(traffic_folder(tmp_path, [{"id": "m1", "messages": turns}])))
    want = len(_token_ids(AutoTokenizer.from_pretrained(tokenizer_model),
                          suite.items[0].request))
    base = _cfg(tokenizer_model, {"concurrency": [1]})
    for limit, refused in ((want, True), (want + 1, False)):
        cfg = base.model_copy(update={"engine": base.engine.model_copy(
            update={"max_model_len": limit})})
        assert bool(context_problems(cfg, [suite])) is refused, limit
