"""Multi-turn chat workloads: conversations drawn as turns whose context grows, written
for the chat client, its prompts each beginning with the one before, and its results read
as any level's."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.config.load import LoadProfile
from workbench.loadtest.results import parse_level, workload_summary
from workbench.loadtest.saturation import saturation
from workbench.loadtest.workload import draw_requests, write_conversations
from workbench.subprocesses.chat_sessions import ABANDONED, SKIPPED, detailed, prompts_of

PROFILE = LoadProfile(concurrency=[2], num_prompts=3, prompt_tokens=40, output_tokens=8,
                      shared_prefix_tokens=16, conversation={
                          "turns": 4, "think_time_s": 0.5,
                          "user_tokens": {"distribution": "uniform", "min": 4, "max": 12}})


def test_a_conversation_s_context_grows_by_each_answer_and_user_message() -> None:
    turns = draw_requests(PROFILE, 3, seed=0)
    assert len(turns) == 12 and [t.conversation for t in turns] == [0] * 4 + [1] * 4 + [2] * 4
    for before, after in zip(turns, turns[1:], strict=False):
        if after.conversation == before.conversation:
            user = after.prompt_tokens - before.prompt_tokens - before.output_tokens
            assert 4 <= user <= 12 and after.think_s >= 0
    assert all(t.think_s == 0 for t in turns[::4])  # a conversation's first turn: no pause
    assert draw_requests(PROFILE, 3, seed=0) == turns  # seeded
    summary = workload_summary(PROFILE, turns)
    assert summary["conversations"] == 3 and summary["turns"] == 4
    assert summary["requests_per_level"] == 12


def test_each_turn_s_prompt_begins_with_the_whole_turn_before(tmp_path: Path) -> None:
    turns = draw_requests(PROFILE, 3, seed=0)
    spec_file = tmp_path / "conversations.json"
    assert write_conversations(turns, 16, salt=1, path=spec_file) == 3
    spec = json.loads(spec_file.read_text())
    prompts = prompts_of(spec, vocab=49152)
    for c, conversation in enumerate(prompts):
        for k, prompt in enumerate(conversation):
            assert len(prompt) == spec["conversations"][c][k]["prompt_tokens"]
            assert prompt[:16] == prompts[0][0][:16]  # the shared prefix, everywhere
            if k:
                assert prompt[:len(conversation[k - 1])] == conversation[k - 1]
    assert prompts[0][0][16:] != prompts[1][0][16:]  # conversations differ after it
    other = prompts_of({**spec, "salt": 2}, vocab=49152)
    assert other[0][0][16:] != prompts[0][0][16:]  # and levels do not share a cache


def turn(start: float, ttft: float = 0.05, latency: float = 0.4, ok: bool = True,
         error: str = "") -> SimpleNamespace:
    return SimpleNamespace(success=ok, start_time=start, ttft=ttft, latency=latency,
                           output_tokens=8 if ok else 0, prompt_len=40, error=error,
                           itl=[0.05] * 7 if ok else [])


def test_the_client_s_results_read_as_any_level() -> None:
    outputs = [turn(float(i)) for i in range(14)] + [
        turn(14.0, ok=False, error="timeout"), turn(0.0, ok=False, error=ABANDONED),
        turn(0.0, ok=False, error=SKIPPED)]
    specs = [{"prompt_tokens": 40, "output_tokens": 8, "think_s": 0.0}] * len(outputs)
    raw = detailed(outputs, specs, concurrency=2)
    assert raw["completed"] == 14 and raw["failed"] == 2
    assert raw["duration"] == pytest.approx(13.4) and raw["p99_ttft_ms"] == pytest.approx(50)
    assert raw["mean_tpot_ms"] == pytest.approx(50)  # (0.4 - 0.05) / 7
    level = parse_level(raw, PROFILE, 2, Path("raw.json"))
    assert level.completed == 14 and level.failed == 2 and level.skipped == 1
    assert level.concurrency == 2 and level.ttft_ms["p50"] == pytest.approx(50)
    assert saturation(raw)["over_saturated"] is False  # one turn at a time: steady


def test_conversations_are_for_concurrency_levels_only() -> None:
    with pytest.raises(ValueError, match="conversations in flight"):
        LoadProfile(request_rate=[1], conversation={"turns": 2})


def test_validate_refuses_a_conversation_longer_than_the_context(tmp_path: Path) -> None:
    # 128 + 48 for the first turn, then 3 more answers and user messages of 48 + 700: the
    # last turn holds 2,420 tokens, past max_model_len 2048; a lone request would fit
    default = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"
    (tmp_path / "gates").symlink_to(default.parent / "gates")
    config = tmp_path / "chat.yaml"
    config.write_text(default.read_text().replace(
        "  profiles:\n",
        "  profiles:\n    chat:\n      concurrency: [1]\n      prompt_tokens: 128\n"
        "      output_tokens: 48\n      conversation: {turns: 4, user_tokens: 700}\n", 1))
    runs = tmp_path / "runs"
    # every profile the config declares is checked, the one this run measures or not
    result = CliRunner().invoke(main, ["validate", "--config", str(config), "--runs-dir",
                                       str(runs)])
    assert result.exit_code == 2, result.output
    assert "(2420 tokens" in result.output
    assert "over 4 conversation turns) exceeds engine.max_model_len (2048)" in result.output
    assert not runs.exists()
