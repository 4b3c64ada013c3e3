"""A sweep on the tiny model through the real engine: a candidate identical to the
baseline (A/A), int4 and a broken one (weights scrambled).

The A/A candidate is promoted; the broken one is rejected, names the gate it failed, and
is never on the front nor recommended. The sweep is interrupted once and resumes
measuring only what is missing; run again with nothing changed it measures nothing and
reproduces the same sweep record. MLflow holds a parent run with a child per candidate and
the recommended version's alias, and the UI shows them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import find_pids

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ENGINE = "vllm.entrypoints.openai.api_server"

CONFIG = """
model: {{name: tiny-llama, path: {model}}}
candidates:
  same: {{recipe: none}}              # the baseline's own weights and engine arguments: A/A
  int4: {{recipe: w4a16, group_size: 64}}
  broken: {{checkpoint: {broken}}}
calibration:
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
  num_samples: 16
  seq_len: 64
engine: {{max_model_len: 512, enforce_eager: true, kv_cache_space_gib: 1, startup_timeout_s: 600}}
suites: [arithmetic, heldout-text]
profile: smoke
load:
  profile: tiny
  rounds: 1                           # latency is not what this test judges
  profiles:
    tiny: {{concurrency: [1], num_prompts: 4, prompt_tokens: 32, output_tokens: 8,
           warmup_prompts: 1, slo: {{ttft_p99_ms: 60000, tpot_p99_ms: 60000}}}}
gates: gates.yaml
tracking: {{experiment: sweep}}
"""
# Quality on a random model is ~0 for both, so the fidelity gate is what can see damage:
# KL of the candidate's next-token distribution from the baseline's on held-out text.
# No quality gate: the random model gives one answer to every arithmetic item, so such a
# gate could not see a change and would say so (inconclusive). For the same reason the
# sweep ranks quality by top-1 agreement rather than by a gated delta.
GATES = """
fidelity:
  - {suite: heldout-text, max_kl_mean: 0.05, min_top1_agreement: 0.9}
  - {suite: arithmetic, max_flip_rate: 0.05}
memory:
  - {metric: kv_cache_tokens, min_ratio: 1.0}
sweep: {objective: cost, quality: top1_agreement}
"""
CANDIDATES = ("--candidate", "same", "--candidate", "int4", "--candidate", "broken")


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


def sweep(tmp_path: Path, config: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", "sweep", "--config", str(config),
         *CANDIDATES, "--runs-dir", "runs"], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=os.environ,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def finish(proc: subprocess.Popen, timeout: float = 1500) -> tuple[int, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


def newest_sweep(tmp_path: Path) -> Path:
    return sorted((tmp_path / "runs").glob("*-sweep*"))[-1]


def comparable(record: dict) -> str:
    """The sweep record without what differs between two runs of it by nature: where and
    when it ran, how long it took, MLflow ids, and which figures came from the cache."""
    drop_rows = ("run_dir", "evaluate_s", "measured_now")
    rows = [{k: v for k, v in r.items() if k not in drop_rows} for r in record["rows"]]
    kept = {k: v for k, v in record.items()
            if k not in ("sweep_dir", "created_at", "wall_time_s", "mlflow", "rows")}
    return json.dumps({**kept, "rows": rows}, sort_keys=True)


def test_sweep_ranks_rejects_the_broken_resumes_and_reproduces(
        tiny_model: Path, broken_model: Path, tmp_path: Path) -> None:
    (tmp_path / "gates.yaml").write_text(GATES)
    config = tmp_path / "sweep.yaml"
    config.write_text(CONFIG.format(model=tiny_model, broken=broken_model, repo=REPO))

    # 1. interrupted once the A/A candidate is done, while int4 is being built
    proc = sweep(tmp_path, config)
    deadline = time.monotonic() + 900
    while not list((tmp_path / "runs").glob("*-sweep/int4")):
        assert proc.poll() is None, finish(proc)[1]
        assert time.monotonic() < deadline, "int4 never started"
        time.sleep(1)
    proc.send_signal(signal.SIGINT)
    code, out = finish(proc, timeout=120)
    assert code == 130, out
    interrupted = newest_sweep(tmp_path)
    assert (interrupted / "same" / "decision.json").is_file()
    assert not (interrupted / "sweep.json").exists()
    deadline = time.monotonic() + 30
    while find_pids(ENGINE) or find_pids("workbench/quantize/worker.py"):
        assert time.monotonic() < deadline, "a process outlived the interrupted sweep"
        time.sleep(1)

    # 2. run again: the A/A pair comes from the cache, int4 and broken are measured
    code, out = finish(sweep(tmp_path, config))
    assert code == 0, out
    assert "baseline and same: reused the pair measured together" in out
    assert out.count("engine healthy") == 4  # two sessions each for int4 and broken
    folder = newest_sweep(tmp_path)
    record = json.loads((folder / "sweep.json").read_text())
    from workbench.schemas.sweep import validate_sweep

    validate_sweep(record)
    rows = {r["candidate"]: r for r in record["rows"]}
    assert [rows[n]["measured_now"] for n in ("same", "int4", "broken")] == [False, True, True]
    assert rows["same"]["decision"] == "promote"
    assert rows["same"]["top1_agreement"] == pytest.approx(1.0, abs=0.01)
    broken = rows["broken"]
    assert broken["decision"] == "reject" and not broken["on_front"]
    assert "fidelity:heldout-text:kl_mean" in broken["failing_gates"]
    assert broken["kl_mean"] > 1.0
    assert "broken" not in record["front"]
    rec = record["recommendation"]
    assert rec["candidate"] in ("same", "int4") and rows[rec["candidate"]]["on_front"]
    assert rec["others"]["broken"].startswith("rejected: ")
    assert record["exit_code"] == 0 and (folder / "pareto.png").stat().st_size > 10_000
    md = (folder / "sweep.md").read_text()
    assert f"**Recommended: `{rec['candidate']}`**" in md and "| broken | reject |" in md
    for name in ("same", "int4", "broken"):  # each with its own decision record
        decision = json.loads((folder / name / "decision.json").read_text())
        assert decision["decision"] == rows[name]["decision"]

    # 3. run again with nothing changed: nothing measured, the same sweep record
    code, out = finish(sweep(tmp_path, config))
    assert code == 0, out
    assert "engine healthy" not in out and out.count("reused the pair") == 3
    again = json.loads((newest_sweep(tmp_path) / "sweep.json").read_text())
    assert comparable(again) == comparable(record)
    assert not find_pids(ENGINE)

    check_mlflow(tmp_path, again)


def check_mlflow(tmp_path: Path, record: dict) -> None:
    """A parent run per sweep with a child per candidate carrying its decision and the same
    metric names; the recommended version has the alias; the UI opens on the runs."""
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name("sweep")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    parent = client.get_run(record["mlflow"]["run_id"])
    assert parent.data.tags["kind"] == "sweep"
    assert parent.data.tags["recommended"] == record["recommendation"]["candidate"]
    children = [r for r in mlflow.search_runs(experiment_names=["sweep"], output_format="list")
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    decisions = {r.data.tags["candidate"]: r.data.tags["decision"] for r in children}
    assert decisions == {r["candidate"]: r["decision"] for r in record["rows"]}
    shared = set.intersection(*(set(r.data.metrics) for r in children))
    assert {"candidate.arithmetic.accuracy", "fidelity.heldout-text.kl_mean",
            "decision_code"} <= shared
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"sweep.json", "sweep.md", "pareto.png"} <= artifacts
    version = client.get_model_version_by_alias("tiny-llama", "recommended")
    assert version.tags["candidate"] == record["recommendation"]["candidate"]
    assert version.tags["decision"] == "promote"

    from mlflow_ui import compare_page_dom, ui_dom

    # the link the record gives opens the experiment on its runs, the sweep's parent first
    assert record["mlflow"]["ui"].endswith("/runs?workflowType=machine_learning")
    runs_page = ui_dom(tmp_path / "mlflow.db", [record["mlflow"]["ui"]])[0]
    assert "tiny-llama:sweep" in runs_page and "Run Name" in runs_page
    dom = compare_page_dom(tmp_path / "mlflow.db", experiment.experiment_id,
                           [parent.info.run_id, *(r.info.run_id for r in children)])
    assert "tiny-llama:sweep" in dom and "tiny-llama:broken" in dom
    assert ">reject<" in dom and ">promote<" in dom  # the decision tags, side by side
