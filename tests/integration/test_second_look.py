"""A second look through the real engine: a good candidate that the smoke sample cannot
show to meet a floor is measured again on every item, and passes.

The talking model of test_looping_candidate knows the word that follows each word of its
cycle, so it answers a next-word suite right every time. Its own weights as the candidate
(an A/A) meet a 0.9 floor in truth; 20 of 20 right cannot show it at the level each of two
looks is judged at (the exact interval's lower bound is 0.80), 120 of 120 can (0.96). The
first look is inconclusive with nothing failed, so evaluate measures every item and
promotes; the first look's record stays in look-1/, `gate` judges the run again the same
way, and a rerun measures nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_looping_candidate import REPO, cycle_model, single_token_words

# four engine sessions (about 4 to 5 minutes on a 2-core CPU): in the slow tier, to hold CI
# within its 40 minutes; the looks' logic and pricing are unit tests (test_looks.py)
pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = """
model: {{name: talking-llama, path: {talking}}}
candidates:
  same: {{recipe: none}}
calibration:
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
engine: {{max_model_len: 512, enforce_eager: true, kv_cache_space_gib: 1, startup_timeout_s: 600}}
suites: [{suite}]
profile: smoke
load:
  profile: tiny
  rounds: 1
  profiles:
    tiny: {{concurrency: [1], num_prompts: 4, prompt_tokens: 32, output_tokens: 8,
           warmup_prompts: 1}}
gates: gates.yaml
tracking: {{experiment: second-look}}
"""
GATES = """
second_look: true
quality:
  - {suite: next-word-120, max_drop: 0.2, min_value: 0.9}
"""


def next_word_suite(folder: Path, items: int, smoke: int) -> Path:
    """After a word of the talking model's cycle, which of two words comes next (the right
    one first or second in turn, so that one answer to every item is not right)."""
    words = single_token_words()[:150]
    folder.mkdir()
    (folder / "suite.yaml").write_text(
        f'name: {folder.name}\nversion: "1"\nkind: quality\nprompt_template: "{{context}}"\n'
        f"scoring: choice\nsample:\n  smoke: {smoke}\n")
    rows = [{"id": f"w{i:03d}", "context": f" {words[i]}",
             "choices": [f" {words[i + 1]}", f" {words[(i + 7) % 150]}"][::1 - 2 * (i % 2)],
             "answer": i % 2, "slices": ["words"]} for i in range(4, 4 + items)]
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "SOURCE.md").write_text("Written by this test from its own word list.\n")
    (folder / "LICENSE").write_text("The project's licence (LICENSE at the top).\n")
    return folder


def test_a_floor_the_smoke_sample_leaves_open_is_decided_by_a_second_look(
        tiny_model: Path, tmp_path: Path, workbench) -> None:
    talking = cycle_model(tiny_model, tmp_path / "talking", 150)
    suite = next_word_suite(tmp_path / "next-word-120", 120, 20)
    (tmp_path / "gates.yaml").write_text(GATES)
    config = tmp_path / "look.yaml"
    config.write_text(CONFIG.format(talking=talking, repo=REPO, suite=suite))

    run = workbench("evaluate", "--candidate", "same", "--config", str(config),
                    "--runs-dir", "runs", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "second look" in run.stdout
    run_dir = next((tmp_path / "runs").glob("*-same"))
    record = json.loads((run_dir / "decision.json").read_text())
    assert record["decision"] == "promote"
    looks = record["policy"]["looks"]
    assert looks["planned"] == looks["taken"] == 2 and looks["profiles"] == ["smoke", "full"]
    assert looks["confidence_per_look"] == pytest.approx(0.975)
    assert looks["first_look"]["decision"] == "inconclusive"
    assert looks["first_look"]["open_gates"] == ["quality:next-word-120:floor"]
    floor = next(g for g in record["gates"] if g["gate"] == "quality:next-word-120:floor")
    assert floor["status"] == "pass" and floor["evidence"]["candidate"]["n"] == 120
    assert floor["baseline_status"] == "pass"

    first = json.loads((run_dir / "look-1" / "decision.json").read_text())
    first_floor = next(g for g in first["gates"] if g["gate"] == "quality:next-word-120:floor")
    assert first_floor["status"] == "inconclusive"
    assert first_floor["evidence"]["candidate"]["n"] == 20
    assert first["policy"]["looks"]["taken"] == 1 and first["policy"]["confidence"] == 0.975
    assert "Two looks" in (run_dir / "decision.md").read_text()

    # judged again, no engine: the same looks, the same level, the same decision
    regated = workbench("gate", str(run_dir), cwd=tmp_path)
    assert regated.returncode == 0, regated.stdout + regated.stderr
    again = json.loads((run_dir / "gate-stored" / "decision.json").read_text())
    assert again["decision"] == "promote" and again["policy"]["confidence"] == 0.975

    # run again with nothing changed: both looks come from the cache, no engine starts
    rerun = workbench("evaluate", "--candidate", "same", "--config", str(config),
                      "--runs-dir", "runs", cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "engine healthy" not in rerun.stdout
    assert rerun.stdout.count("reused the pair") == 2
