"""`workbench tune` through the real quantiser and engine, on a model whose fragile block
is known (conftest.fragile_model): int4 as stated is rejected on fidelity, the layer
sensitivity ranks block 2 first, the trial keeping it in 16-bit is promoted on the search
half and confirmed on the held-out half, and the recipe handed back names it. Run again,
the tune measures nothing. The default run walks a declared space of recipes (the config's
`tune.space`); the keep-k search without one is in the slow tier (its logic is the unit
tests' of tune/walk.py). On a CPU without an int4 kernel (AVX2, or the ISA cap) every
trial is served dense, and the same search reaches the same answer on quality alone.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from quantised import DENSE_HERE, FRAGILE_BLOCK, FRAGILE_KL_GATE, fragile_config

from workbench.tune.record import validate_tune

# Where vLLM-CPU has no int4 kernel (AVX2; or WORKBENCH_CPU_ISA_CAP=avx2 on an AVX-512 CPU)
# every trial is served dense and judged on its quality: the same search, the same answer.
# There it is in the slow tier (about 7 minutes; CI's 40 minutes on an AVX2 CPU keep
# test_dense_serving): `bash scripts/test.sh -m slow tests/integration/test_tune.py`.
pytestmark = [pytest.mark.integration, *([pytest.mark.slow] if DENSE_HERE else [])]

GATES = FRAGILE_KL_GATE
# The space: GPTQ, symmetric, groups of 64 or 256 (which the model's 128-wide layers cannot
# take), the recipe alone or with the most sensitive block kept in 16-bit
SPACE = """
tune:
  space: {methods: [gptq], symmetric: [true], group_sizes: [64, 256], keep: [0, 1]}
"""


def test_tune_walks_a_space_of_recipes_to_the_cheapest_promoted_and_confirms_it(
        fragile_model: Path, tmp_path: Path, workbench) -> None:
    (tmp_path / "gates.yaml").write_text(GATES)
    (tmp_path / "c.yaml").write_text(fragile_config(fragile_model, "full", "tune") + SPACE)
    args = ("tune", "--candidate", "int4", "--config", "c.yaml", "--runs-dir", "runs")

    first = workbench(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    tune_dir = next((tmp_path / "runs").glob("*-tune-int4"))
    record = json.loads((tune_dir / "tune.json").read_text())
    validate_tune(record)
    space = record["space"]
    # the point that builds int4 as stated is int4 itself, under its own name
    assert [p["name"] for p in space["points"]] == ["int4", "int4-gptq-sym-g64-keep1"]
    assert space["points"][0]["weight_bytes"] < space["points"][1]["weight_bytes"]
    assert space["points"][1]["values"]["kept"] == [FRAGILE_BLOCK]
    assert {lo["name"] for lo in space["left_out"]} == {"int4-gptq-sym-g256",
                                                         "int4-gptq-sym-g256-keep1"}
    assert all("does not divide" in lo["why"] for lo in space["left_out"])
    assert record["sensitivity"]["ranked"][0]["block"] == FRAGILE_BLOCK
    coarse, kept = record["trials"]["rows"]
    assert (coarse["candidate"], coarse["decision"]) == ("int4", "reject")
    assert (kept["candidate"], kept["decision"]) == ("int4-gptq-sym-g64-keep1", "promote")
    # the symmetric coarse recipe failed its fidelity bound past doubt on its one suite:
    # stopped there, its load test not run, and the table and its record say so
    assert coarse["stopped_by"] == ["fidelity:heldout-text:kl_mean"]
    assert coarse["not_measured"] == ["load test"]
    stop = json.loads((tune_dir / "int4" / "decision.json").read_text())
    assert stop["early_stop"]["gates"] == ["fidelity:heldout-text:kl_mean"]
    assert "is the cheapest point promoted" in record["stopped"]
    out = record["outcome"]
    assert out["status"] == "confirmed" and out["trial"] == "int4-gptq-sym-g64-keep1"
    assert out["kept"] == [FRAGILE_BLOCK] and record["confirmation"]["decision"] == "promote"
    assert out["label"] == f"gptq sym g64, blocks [{FRAGILE_BLOCK}] in 16-bit"
    md = (tune_dir / "tune.md").read_text()
    assert "## The space, in the order tried" in md and "Left out: `int4-gptq-sym-g256`" in md
    built = yaml.safe_load(Path(out["recipe_file"]).read_text())
    ignore = built["default_stage"]["default_modifiers"]["GPTQModifier"]["ignore"]
    assert any(e.startswith("re:") and re.fullmatch(e[3:], "model.layers.2.mlp.down_proj")
               for e in ignore)

    again = workbench(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "engine healthy" not in again.stdout and "measuring" not in again.stdout
    assert again.stdout.count("reused the pair measured together") == 3  # 2 trials + confirm


# slow: the keep-k search without a space, through the engine (its schedule is unit-tested
# in test_tune_walk.py and its trials are the space's with `keep`): about 6 minutes;
# `bash scripts/test.sh -m slow tests/integration/test_tune.py`
@pytest.mark.slow
def test_tune_keeps_the_fragile_block_and_confirms_it_on_held_out_items(
        fragile_model: Path, tmp_path: Path, workbench) -> None:
    (tmp_path / "gates.yaml").write_text(GATES)
    (tmp_path / "c.yaml").write_text(fragile_config(fragile_model, "full", "tune"))
    args = ("tune", "--candidate", "int4", "--config", "c.yaml", "--runs-dir", "runs",
            "--max-trials", "4")

    first = workbench(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    tune_dir = next((tmp_path / "runs").glob("*-tune-int4"))
    record = json.loads((tune_dir / "tune.json").read_text())
    validate_tune(record)
    assert record["sensitivity"]["ranked"][0]["block"] == FRAGILE_BLOCK
    decisions = {r["candidate"]: r["decision"] for r in record["trials"]["rows"]}
    assert decisions == {"int4": "reject", "int4-keep1": "promote"}
    assert record["kept"] == {"int4": [], "int4-keep1": [FRAGILE_BLOCK]}
    assert "fidelity:heldout-text:kl_mean" in record["trials"]["rows"][0]["failing_gates"]
    # int4 as stated failed its fidelity bound past doubt on its one suite: the trial was
    # stopped there, its load test not run, and tune's table says by which gate
    stopped, kept = record["trials"]["rows"]
    assert stopped["stopped_by"] == ["fidelity:heldout-text:kl_mean"]
    assert stopped["not_measured"] == ["load test"]
    assert kept["stopped_by"] == [] and kept["not_measured"] == []
    assert "stopped early by fidelity:heldout-text:kl_mean" in (tune_dir / "tune.md").read_text()
    assert "int4 stopped early after heldout-text" in first.stdout
    assert {r["served_dense"] for r in record["trials"]["rows"]} == {DENSE_HERE}
    if DENSE_HERE:  # the table and the outcome say the speed figures are not int4's
        assert all(r["format"] == "W4A16 (served dense)" for r in record["trials"]["rows"])
        assert "promoted on its quality alone" in record["outcome"]["reason"]
    out = record["outcome"]
    assert out["status"] == "confirmed" and out["trial"] == "int4-keep1"
    assert record["confirmation"]["decision"] == "promote"

    # each decision says which half of the items it read, and the halves do not overlap
    search = json.loads((tune_dir / "int4-keep1" / "decision.json").read_text())
    confirm = json.loads((Path(out["confirmation_dir"]) / "decision.json").read_text())
    assert search["sampling"]["split"]["part"] == "search"
    assert confirm["sampling"]["split"]["part"] == "confirm"
    ids = [{i["id"] for i in json.loads((d / "candidate" / "measurement.json").read_text())
            ["suites"]["heldout-text"]["items"]}
           for d in (tune_dir / "int4-keep1", Path(out["confirmation_dir"]))]
    assert ids[0] == ids[1] and len(ids[0]) > 100  # every item measured, once
    assert confirm["fidelity"]["heldout-text"]["items"] + search["fidelity"]["heldout-text"][
        "items"] == len(ids[0])

    recipe = yaml.safe_load(Path(out["recipe_file"]).read_text())
    ignore = recipe["default_stage"]["default_modifiers"]["GPTQModifier"]["ignore"]
    kept = [e for e in ignore if e.startswith("re:")]
    assert len(kept) == 1 and re.fullmatch(kept[0][3:], "model.layers.2.mlp.down_proj")
    assert not re.fullmatch(kept[0][3:], "model.layers.1.mlp.down_proj")
    entry = yaml.safe_load(Path(out["candidate_file"]).read_text())
    assert entry["candidates"]["int4-keep1"]["recipe_file"] == out["recipe_file"]
    assert (tune_dir / "tune.png").is_file() and "int4-keep1" in (tune_dir / "tune.md").read_text()

    again = workbench(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "engine healthy" not in again.stdout and "measuring" not in again.stdout
    assert again.stdout.count("reused the pair measured together") == 3  # 2 trials + confirm
    # the stopped trial's cached pair judged again where its log-probabilities are: still
    # stopped by its measured KL, not by a figure that went missing
    rerun = max((tmp_path / "runs").glob("*-tune-int4")) / "int4" / "decision.json"
    stop = json.loads(rerun.read_text())["early_stop"]
    assert stop["gates"] == ["fidelity:heldout-text:kl_mean"], stop
    assert re.match(r"kl_mean \d", stop["evidence"][0]), stop


# slow: the fault tier's (docs/reliability.md) — three engine sessions for a rule CI checks
# on evaluate (test_pipeline: an engine killed mid-run); `bash scripts/test.sh -m slow`
@pytest.mark.slow
def test_an_engine_killed_in_a_trial_ends_the_tune_with_exit_3_and_keeps_the_trials(
        fragile_model: Path, tmp_path: Path) -> None:
    """The engine of the second trial SIGKILLed: exit 3, the first trial's decision and the
    table so far kept, the failed trial named, MLflow's tune run FAILED, nothing left."""
    from test_faults import ENGINE, finish, mlflow_status, no_process_left, pids, wait_for

    (tmp_path / "gates.yaml").write_text(GATES)
    # other load sizes than the first test: a pair of its own to measure, artifacts shared
    (tmp_path / "c.yaml").write_text(fragile_config(fragile_model, "full", "tune").replace(
        "num_prompts: 4", "num_prompts: 6"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", "tune", "--candidate", "int4", "--config",
         "c.yaml", "--runs-dir", "runs"], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=os.environ)
    trial = wait_for(lambda: pids("served-model-name fragile-int4-keep1"), proc,
                     what="the second trial's engine")
    for pid in trial:
        os.kill(pid, signal.SIGKILL)
    code, out, err = finish(proc, timeout=600)
    assert code == 3, out[-3000:] + err[-3000:]
    assert "tune stopped: trial int4-keep1 failed" in err
    record = json.loads(next((tmp_path / "runs").glob("*-tune-int4/tune.json")).read_text())
    validate_tune(record)
    rows = {r["candidate"]: r["status"] for r in record["trials"]["rows"]}
    assert rows == {"int4": "decided", "int4-keep1": "failed"}
    assert record["outcome"]["status"] == "failed" and record["exit_code"] == 3
    assert mlflow_status(tmp_path / "mlflow.db", "tune") == ["FAILED"]  # the tune run
    no_process_left(ENGINE)
