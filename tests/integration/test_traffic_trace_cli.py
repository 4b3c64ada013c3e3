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


def test_a_trace_from_traffic_counts_templated_prompts(tiny_model: Path, tmp_path: Path,
                                                       workbench) -> None:
    suite = traffic_suite(tmp_path / "my-traffic")
    config = write_config(tmp_path, tiny_model, suite, 512)
    out = tmp_path / "trace.jsonl"
    run = workbench("traffic-trace", str(suite), "--out", str(out), "--rate", "3",
                    "--config", str(config), cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
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
    assert set(out.read_text().replace("\n", " ").split('"')[1::2]) == {
        "arrival_s", "prompt_tokens", "output_tokens"}  # numbers only

    short = write_config(tmp_path, tiny_model, suite, 64)
    refused = workbench("validate", "--config", str(short), cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "item 'support-" in refused.stderr and "over engine.max_model_len 64" in refused.stderr
