"""int4 on a CPU whose engine has no int4 kernel (an AVX2 CPU, here the ISA cap): evaluate
builds the int4 artifact the config asks for, serves its weights dequantised, judges its
quality on them, and judges no speed or memory gate; the record, decision.md, the console's
first lines and MLflow say so (quantize/dense.py, gate/served.py; docs/candidates.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from quantised import DENSE_HERE

from workbench.mechanisms.host import ISA_CAP_ENV

pytestmark = pytest.mark.integration

CONFIG = """\
model: {{name: fragile, path: {model}}}
candidates:
  int4: {{recipe: w4a16, group_size: 64}}
calibration:
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
  heldout: [{repo}/calibration_data/heldout.jsonl]
  num_samples: 8
  seq_len: 128
  heldout_samples: 8
engine: {{max_model_len: 512, enforce_eager: true, kv_cache_space_gib: 1, startup_timeout_s: 600}}
suites: [heldout-text]
profile: smoke
load:
  profile: tiny
  rounds: 1
  profiles:
    tiny: {{concurrency: [1], num_prompts: 4, prompt_tokens: 32, output_tokens: 8,
           warmup_prompts: 1}}
gates: gates.yaml
tracking: {{experiment: dense}}
"""
# int4 moves the fragile model's token KL to about 0.06 on held-out text (test_tune.py):
# a fail of its own weights; the speed and memory gates would pass on a dense model's
# figures (a dense checkpoint of the baseline's dtype is the baseline's size and speed)
GATES = """
fidelity:
  - {suite: heldout-text, max_kl_mean: 0.03}
latency:
  - {metric: tpot_p50_ms, max_ratio: 5.0}
memory:
  - {metric: kv_cache_tokens, min_ratio: 0.5}
  - {metric: weights_bytes, max_ratio: 2.0}
"""
REPO = Path(__file__).resolve().parents[2]


def test_int4_without_its_kernel_is_judged_on_its_own_weights_served_dense(
        fragile_model: Path, tmp_path: Path, workbench, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    if not DENSE_HERE:  # an AVX-512 CPU: the engine's AVX2 library, as an AVX2 CPU has
        monkeypatch.setenv(ISA_CAP_ENV, "avx2")
    (tmp_path / "gates.yaml").write_text(GATES)
    (tmp_path / "c.yaml").write_text(CONFIG.format(model=fragile_model, repo=REPO))
    ran = workbench("evaluate", "--candidate", "int4", "--config", "c.yaml", "--runs-dir",
                    "runs", "--measure-all", cwd=tmp_path)
    assert ran.returncode == 1, ran.stdout[-3000:] + ran.stderr[-3000:]
    head = ran.stdout.splitlines()[:3]
    assert any(line.startswith("served dense:") for line in head), head
    run_dir = next((tmp_path / "runs").glob("*-int4"))
    record = json.loads((run_dir / "decision.json").read_text())

    # the int4 recipe was built, and its own weights were what the engine served
    dense = record["served_dense"]
    assert dense["format"] == "W4A16" and "AVX2" in dense["why"]
    assert record["quantization"]["served_format"]["label"] == "W4A16"
    assert record["quantization"]["recipe"]["recipe"] == "w4a16"
    facts = json.loads((Path(dense["checkpoint"]) / "dense.json").read_text())
    assert facts["artifact"] == record["model"]["candidate_path"]
    served = json.loads((run_dir / "candidate" / "measurement.json").read_text())["server"]
    assert served["model_path"] == dense["checkpoint"]
    assert "quantization_config" not in json.loads(
        (Path(dense["checkpoint"]) / "config.json").read_text())

    # quality is int4's: its KL fails as it does where the int4 kernel serves it; no speed
    # or memory gate is judged, and no load test ran for the candidate
    gates = {g["gate"]: g for g in record["gates"]}
    assert gates["fidelity:heldout-text:kl_mean"]["status"] == "fail"
    speed_and_memory = [g for name, g in gates.items()
                        if name.startswith(("latency:", "memory:"))]
    assert {g["id"]["section"] for g in speed_and_memory} == {"latency", "memory"}
    for gate in speed_and_memory:
        assert gate["status"] == "not_measured", gate
        assert gate["detail"].startswith("not applicable on this device"), gate
    assert record["load"]["candidate"]["levels"] == []
    assert record["decision"] == "reject" and record["early_stop"] is None

    markdown = (run_dir / "decision.md").read_text()
    assert markdown.count("**Served dense: quality is W4A16's own, speed and memory could "
                          "not be measured here.**") == 1
    import mlflow

    mlflow.set_tracking_uri(record["mlflow"]["tracking_uri"])
    run = mlflow.MlflowClient().get_run(record["mlflow"]["run_id"])
    assert run.data.tags["served"] == "dense" and run.data.tags["served.format"] == "W4A16"
