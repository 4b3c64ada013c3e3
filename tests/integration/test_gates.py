"""The verdict on the tiny model through the real engine: a candidate identical to the
baseline is promoted; a broken one (weights scrambled) is rejected, and the record names
the gates that failed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
model: {{name: tiny-llama, path: {model}}}
candidates:
  same: {{recipe: none}}              # the baseline's own weights and engine arguments: A/A
  broken: {{checkpoint: {broken}}}
calibration:
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
engine: {{max_model_len: 512, enforce_eager: true, kv_cache_space_gib: 1, startup_timeout_s: 600}}
suites: [arithmetic, heldout-text]
profile: smoke
load:
  profile: tiny
  rounds: 1                           # latency is not what this test judges
  profiles:
    tiny: {{concurrency: [1], num_prompts: 4, prompt_tokens: 32, output_tokens: 8,
           warmup_prompts: 1}}
gates: gates.yaml
tracking: {{experiment: gates}}
"""
# Quality on a random model is ~0 for both, so the fidelity gate is what can see damage:
# KL of the candidate's next-token distribution from the baseline's on held-out text.
# No quality gate: the random model gives one answer to every arithmetic item, so such a
# gate could not see a change and would say so (inconclusive).
GATES = """
fidelity:
  - {suite: heldout-text, max_kl_mean: 0.05, min_top1_agreement: 0.9}
  - {suite: arithmetic, max_flip_rate: 0.05}
memory:
  - {metric: kv_cache_tokens, min_ratio: 1.0}
"""


@pytest.fixture()
def broken_model(tiny_model: Path, tmp_path: Path) -> Path:
    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path / "broken"
    shutil.copytree(tiny_model, out)
    weights = load_file(out / "model.safetensors")
    generator = torch.Generator().manual_seed(0)
    # Rows of every matrix shuffled, and the (tied) embeddings scaled up: a random model's
    # next-token distribution is nearly flat, so shuffling alone barely moves it (KL ~0);
    # sharper logits make the damage visible, as it would be on a trained model.
    scrambled = {name: w[torch.randperm(w.shape[0], generator=generator)]
                 if w.dim() == 2 and "embed" not in name else w for name, w in weights.items()}
    scrambled = {name: w * 30 if "embed" in name else w for name, w in scrambled.items()}
    save_file(scrambled, out / "model.safetensors", metadata={"format": "pt"})
    return out


def test_identical_candidate_is_promoted_and_a_broken_one_rejected(
        tiny_model: Path, broken_model: Path, tmp_path: Path, workbench) -> None:
    (tmp_path / "gates.yaml").write_text(GATES)
    config = tmp_path / "gates-test.yaml"
    config.write_text(CONFIG.format(model=tiny_model, broken=broken_model, repo=REPO))
    same = workbench("evaluate", "--candidate", "same", "--config", str(config),
                     "--runs-dir", "runs", "--junit", "same.xml", cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    record = json.loads(next((tmp_path / "runs").glob("*-same/decision.json")).read_text())
    assert record["decision"] == "promote"
    assert record["fidelity"]["heldout-text"]["top1_agreement"] == pytest.approx(1.0, abs=0.01)

    broken = workbench("evaluate", "--candidate", "broken", "--config", str(config),
                       "--runs-dir", "runs", cwd=tmp_path)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "baseline: reused cached results" in broken.stdout
    record = json.loads(next((tmp_path / "runs").glob("*-broken/decision.json")).read_text())
    failed = {g["gate"] for g in record["gates"] if g["status"] == "fail"}
    assert record["decision"] == "reject"
    assert "fidelity:heldout-text:kl_mean" in failed
    assert record["fidelity"]["heldout-text"]["kl_mean"] > 1.0
    assert "fidelity:heldout-text:kl_mean" in broken.stdout  # named on the console too
