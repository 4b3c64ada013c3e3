"""Load test and memory headroom on the tiny model, through the real engine: a two-level
sweep for the baseline and a candidate that only changes the KV cache to FP8."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
model: {{name: tiny-llama, path: {model}}}
candidates:
  kv-fp8-dynamic: {{recipe: none, kv_cache_dtype: fp8}}
calibration:  # required by the config format; this candidate calibrates nothing
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
engine: {{max_model_len: 512, enforce_eager: true, kv_cache_space_gib: 1, startup_timeout_s: 600}}
suites: [arithmetic]
profile: smoke
load: {{concurrency: [1, 4], num_prompts: 8, input_len: 64, output_len: 16, warmup_prompts: 1,
       slo: {{ttft_p99_ms: 60000, tpot_p99_ms: 60000}}, price_per_hour: 0.5}}
gates: gates.yaml
tracking: {{experiment: load}}
"""
GATES = """
latency:
  - {metric: output_throughput, min_ratio: 0.05}
"""
LATENCY = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")


def test_sweep_measures_every_figure_and_fp8_kv_doubles_capacity(
        tiny_model: Path, tmp_path: Path, workbench, engine_pids) -> None:
    config = tmp_path / "load.yaml"
    config.write_text(CONFIG.format(model=tiny_model, repo=REPO))
    (tmp_path / "gates.yaml").write_text(GATES)
    run = workbench("evaluate", "--candidate", "kv-fp8-dynamic", "--config", str(config),
                    "--runs-dir", "runs", cwd=tmp_path)
    assert run.returncode in (0, 1), run.stdout + run.stderr
    record = json.loads(next((tmp_path / "runs").glob("*/decision.json")).read_text())
    for role in ("baseline", "candidate"):
        levels = record["load"][role]["levels"]
        assert [lv["concurrency"] for lv in levels] == [1, 4]
        for lv in levels:
            assert lv["completed"] == 8 and lv["failed"] == 0
            assert lv["request_throughput"] > 0 and lv["output_throughput"] > 0
            for metric in LATENCY:  # client-side: p50, p95, p99
                assert 0 < lv[metric]["p50"] <= lv[metric]["p99"]
            for metric in LATENCY:  # the engine's own histograms over the same level
                assert lv["server"]["latency"][metric]["p99"] > 0
            assert lv["slo"]["goodput_rps"] > 0
        room = record["headroom"][role]
        assert room["kv_cache_tokens"] > 0 and room["max_concurrent_sequences"] > 0
        # a tiny model finishes a level between two samples: usage may read 0 here
        assert room["peak_engine_rss_bytes"] > 100 * 2**20 and 0 <= room["peak_kv_cache_usage"] <= 1
        assert record["cost"][role]["usd_per_million_output_tokens"] > 0
        start = record["engine"]["cold_start"][role]
        assert start["first_token_s"] >= start["healthy_s"] > 0
    base, cand = record["headroom"]["baseline"], record["headroom"]["candidate"]
    assert cand["kv_cache_dtype"] == "fp8" and base["kv_cache_dtype"] == "auto"
    # same KV memory budget, one byte per value instead of two
    assert cand["kv_cache_tokens"] / base["kv_cache_tokens"] == pytest.approx(2.0, rel=0.05)
    assert cand["weights_bytes"] == base["weights_bytes"]  # the weights are untouched
    assert engine_pids("vllm.entrypoints.openai.api_server") == []
