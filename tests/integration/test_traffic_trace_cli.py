"""`workbench traffic-trace` and the context check of a traffic suite, with a real model's
tokenizer and chat template (the tiny Llama's, SmolLM2's own), no engine: the trace's
prompt lengths are the templated requests' token counts, the shared system prompt shows as
a shared prefix, nothing of a prompt is written; a request too long for the engine's
context is refused by `validate` naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_traffic import traffic_suite
from transformers import AutoTokenizer

from workbench.loadtest.workload import read_trace

pytestmark = pytest.mark.integration

CONFIG = """
model: {{name: tiny, path: {model}}}
candidates:
  same: {{recipe: none}}
calibration:
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
engine: {{max_model_len: {context}, enforce_eager: true}}
suites: [{suite}]
load:
  profile: tiny
  profiles:
    tiny: {{concurrency: [1], num_prompts: 4, prompt_tokens: 16, output_tokens: 8}}
gates: gates.yaml
"""
GATES = "traffic:\n  - {suite: my-traffic, max_drop: 0.1}\n"


def write_config(tmp_path: Path, model: Path, suite: Path, context: int) -> Path:
    (tmp_path / "gates.yaml").write_text(GATES)
    config = tmp_path / f"c{context}.yaml"
    config.write_text(CONFIG.format(model=model, repo=Path(__file__).parents[2], suite=suite,
                                    context=context))
    return config


def write_trace(workbench, tmp_path: Path, model: Path, suite: Path, context: int,
                rate: float):
    """`workbench traffic-trace` of the suite at Poisson arrivals, as a user runs it."""
    config = write_config(tmp_path, model, suite, context)
    out = tmp_path / "trace.jsonl"
    run = workbench("traffic-trace", str(suite), "--out", str(out), "--rate", f"{rate:g}",
                    "--config", str(config), cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    return run, out


def test_a_trace_from_traffic_counts_templated_prompts(tiny_model: Path, tmp_path: Path,
                                                       workbench) -> None:
    suite = traffic_suite(tmp_path / "my-traffic")
    run, out = write_trace(workbench, tmp_path, tiny_model, suite, 512, rate=3)
    trace = read_trace(out, max_model_len=512)
    rows = [json.loads(line) for line in (suite / "requests.jsonl").read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(tiny_model)
    first = rows[0]["messages"]  # the first request arrives first (offset 0)
    want = tok.apply_chat_template(first, add_generation_prompt=True, tokenize=True)
    want = want["input_ids"] if hasattr(want, "keys") else want
    assert trace[0].arrival_s == 0.0 and trace[0].prompt_tokens == len(want)
    assert sorted(q.prompt_tokens for q in trace) != [trace[0].prompt_tokens] * len(trace)
    assert {q.output_tokens for q in trace} == {48, 24}  # the suite's, and max_tokens 24
    assert "shared_prefix_tokens:" in run.stdout and "Poisson at 3 requests/s" in run.stdout
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {k for line in lines for k in line} == {
        "arrival_s", "prompt_tokens", "output_tokens", "prefix_chunks"}
    assert all(isinstance(v, (int, float)) or all(isinstance(c, int) for c in v)
               for line in lines for v in line.values())  # numbers only

    short = write_config(tmp_path, tiny_model, suite, 64)
    refused = workbench("validate", "--config", str(short), cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "item 'support-" in refused.stderr and "over engine.max_model_len 64" in refused.stderr


POLICY = ("You answer for the returns desk of a parcel service. Be brief, be kind, never "
          "promise a refund the policy does not allow, and ask for the order number first. ")


def shared_traffic(folder: Path) -> Path:
    """Sixteen requests: eight of one segment open with the same long system prompt (longer
    than two of vLLM-CPU's 128-token cache blocks), eight of another carry none."""
    folder.mkdir()
    (folder / "suite.yaml").write_text("name: returns\nversion: '1'\nkind: traffic\n"
                                       "scoring: agreement\ndata: requests.jsonl\n"
                                       "max_tokens: 8\n")
    rows = [{"id": f"returns-{k}", "segments": {"task": "returns"}, "messages": [
        {"role": "system", "content": POLICY * 9},
        {"role": "user", "content": f"Order {k}: the lid of item {k * 7} arrived cracked."}]}
        for k in range(8)]
    rows += [{"id": f"chat-{k}", "segments": {"task": "chat"}, "messages": [
        {"role": "user", "content": f"Say something about the number {k * 13} please."}]}
        for k in range(8)]
    (folder / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "SOURCE.md").write_text("Written for this test.\n")
    (folder / "LICENSE").write_text("CC0-1.0\n")
    return folder


# slow: an engine of its own (about a minute) for what the unit tier checks of the trace
# (test_workload, test_traffic_trace); CI on two cores stood at 40.7 min with it (2,440 s,
# 2026-12-07): `bash scripts/test.sh -m slow tests/integration/test_traffic_trace_cli.py`
@pytest.mark.slow
def test_a_system_prompt_one_segment_shares_is_served_from_the_prefix_cache(
        tiny_model: Path, tmp_path: Path, workbench) -> None:
    from workbench.config.run_config import EngineConfig, LoadProfile
    from workbench.loadtest.bench import level_requests, run_load_test
    from workbench.serve.engine import EngineServer

    suite = shared_traffic(tmp_path / "returns")
    run, out = write_trace(workbench, tmp_path, tiny_model, suite, 1024, rate=8)
    assert "shared_prefix_tokens: 0" in run.stdout
    trace = read_trace(out, max_model_len=1024)
    # the segment's system prompt: two cache blocks or more, in the same chunks for all eight
    long = [q for q in trace if len(q.prefix_chunks) * 16 >= 256]
    assert len(long) == 8 and len({q.prefix_chunks[:16] for q in long}) == 1
    plain = tmp_path / "plain.jsonl"  # the same trace with nothing said to be shared
    plain.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items()
                                         if k != "prefix_chunks"}) + "\n"
                             for line in out.read_text().splitlines()))
    engine = EngineConfig(max_model_len=1024, enforce_eager=True, kv_cache_space_gib=1)
    rates = {}
    with EngineServer(tiny_model, "tiny", engine, tmp_path / "server.log") as server:
        for name, path in (("plain", plain), ("shared", out)):  # plain first: a cold cache
            prof = LoadProfile(trace=str(path), replay_speed=[4.0], warmup_prompts=0)
            result = run_load_test(server.base_url, "tiny", tiny_model, prof, tmp_path / name,
                                   level_requests(prof, path, 1024), name=name,
                                   scrape=server.metrics, ceiling=False)
            level = result.levels[0]
            assert level.completed == 16 and level.failed == 0
            rates[name] = level.telemetry["prefix_cache_hit_rate"]
    # seven of the eight find the system prompt's blocks cached by the first
    assert rates["plain"] == 0.0 and rates["shared"] > 0.3, rates
