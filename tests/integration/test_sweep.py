"""A sweep on the tiny model through the real engine: a candidate identical to the
baseline (A/A) and a broken one (weights scrambled); a quantised candidate is
test_pipeline's. The model is named by a hub repo id, resolved offline from a hub cache the
test lays out.

The A/A candidate is promoted; the broken one is rejected, names the gate it failed, and
is never on the front nor recommended. The sweep is interrupted once and resumes
measuring only what is missing; run again with nothing changed it measures nothing and
reproduces the same sweep record. MLflow holds a parent run with a child per candidate and
the recommended version's alias, and the UI shows them. In the slow tier, the A/A and the
broken candidate fanned out on Ray (a local head, two tasks in parallel) reach the same
decisions, logged to a shared MLflow server on PostgreSQL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import find_pids

from workbench.serve.engine import SERVE_MODULE

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ENGINE = SERVE_MODULE  # the engine's launcher, as serve/engine.py starts it

CONFIG = """
model: {{name: tiny-llama, path: acme/tiny-llama}}  # from the hub cache, offline
candidates:
  same: {{recipe: none}}              # the baseline's own weights and engine arguments: A/A
  broken: {{checkpoint: {broken}}}
calibration:  # required by the config format; neither candidate calibrates anything
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
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
CANDIDATES = ("--candidate", "same", "--candidate", "broken")
COMMIT = "5f1e8d3c2b4a69788796a5b4c3d2e1f0a9b8c7d6"


def hub_cache(model: Path, root: Path) -> Path:
    """The layout huggingface_hub keeps (models--org--name/refs/main -> snapshots/<commit>),
    holding the tiny model as the hub's acme/tiny-llama."""
    repo = root / "models--acme--tiny-llama"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    shutil.copytree(model, repo / "snapshots" / COMMIT)
    return root


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


@pytest.mark.slow  # three engine sessions and a resume, about 6 minutes: CI's 40 minutes
def test_sweep_ranks_rejects_the_broken_resumes_and_reproduces(
        tiny_model: Path, broken_model: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = _sweep_config(tiny_model, broken_model, tmp_path, monkeypatch)

    # 1. interrupted once the A/A candidate is done, as the broken one starts
    proc = sweep(tmp_path, config)
    deadline = time.monotonic() + 900
    while not list((tmp_path / "runs").glob("*-sweep/broken")):
        assert proc.poll() is None, finish(proc)[1]
        assert time.monotonic() < deadline, "broken never started"
        time.sleep(1)
    proc.send_signal(signal.SIGINT)
    code, out = finish(proc, timeout=120)
    assert code == 130, out
    interrupted = newest_sweep(tmp_path)
    assert (interrupted / "same" / "decision.json").is_file()
    assert not (interrupted / "sweep.json").exists()
    deadline = time.monotonic() + 30
    while find_pids(ENGINE) or find_pids("workbench/subprocesses/quantize_worker.py"):
        assert time.monotonic() < deadline, "a process outlived the interrupted sweep"
        time.sleep(1)

    # 2. run again: the A/A pair comes from the cache, broken is measured
    code, out = finish(sweep(tmp_path, config))
    assert code == 0, out
    assert "baseline and same: reused the pair measured together" in out
    assert out.count("engine healthy") == 2  # broken's, and the baseline's beside it
    folder = newest_sweep(tmp_path)
    record = json.loads((folder / "sweep.json").read_text())
    from workbench.sweep.schema import validate_sweep

    validate_sweep(record)
    rows = {r["candidate"]: r for r in record["rows"]}
    assert [rows[n]["measured_now"] for n in ("same", "broken")] == [False, True]
    assert rows["same"]["decision"] == "promote"
    assert rows["same"]["top1_agreement"] == pytest.approx(1.0, abs=0.01)
    broken = rows["broken"]
    assert broken["decision"] == "reject" and not broken["on_front"]
    assert "fidelity:heldout-text:kl_mean" in broken["failing_gates"]
    assert broken["kl_mean"] > 1.0
    assert "broken" not in record["front"]
    rec = record["recommendation"]
    assert rec["candidate"] == "same" and rows["same"]["on_front"]
    assert rec["others"]["broken"].startswith("rejected: ")
    assert record["exit_code"] == 0 and (folder / "pareto.png").stat().st_size > 10_000
    md = (folder / "sweep.md").read_text()
    assert f"**Recommended: `{rec['candidate']}`**" in md and "| broken | reject |" in md
    for name in ("same", "broken"):  # each with its own decision record
        decision = json.loads((folder / name / "decision.json").read_text())
        assert decision["decision"] == rows[name]["decision"]
        assert decision["model"]["hub"] == {"repo_id": "acme/tiny-llama", "revision": "main",
                                            "commit": COMMIT}

    # 3. run again with nothing changed: nothing measured, the same sweep record
    code, out = finish(sweep(tmp_path, config))
    assert code == 0, out
    assert "engine healthy" not in out and out.count("reused the pair") == 2
    again = json.loads((newest_sweep(tmp_path) / "sweep.json").read_text())
    assert comparable(again) == comparable(record)
    assert not find_pids(ENGINE)

    check_mlflow(tmp_path, again)


def _sweep_config(tiny_model: Path, broken_model: Path, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "gates.yaml").write_text(GATES)
    config = tmp_path / "sweep.yaml"
    config.write_text(CONFIG.format(broken=broken_model, repo=REPO))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache(tiny_model, tmp_path / "hub")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return config


@pytest.mark.slow
def test_a_sweep_fanned_out_on_ray_reaches_the_serial_decisions(
        tiny_model: Path, broken_model: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The A/A and the broken candidate fanned out on Ray, logged to a shared tracking
    server: the decisions the serial sweep reaches (the test above), A/A promoted and the
    broken candidate rejected."""
    config = _sweep_config(tiny_model, broken_model, tmp_path, monkeypatch)
    fanned_out(tmp_path, config, {"same": "promote", "broken": "reject"})


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
    # runs named so that the table tells them apart: the sweep and what it recommends, each
    # candidate with its decision
    best = record["recommendation"]["candidate"]
    assert f"sweep · 2 candidates · recommends {best}" in runs_page and "Run Name" in runs_page
    dom = compare_page_dom(tmp_path / "mlflow.db", experiment.experiment_id,
                           [parent.info.run_id, *(r.info.run_id for r in children)])
    assert "sweep · 2 candidates" in dom and "broken · reject · " in dom
    assert ">reject<" in dom and ">promote<" in dom  # the decision tags, side by side


def fanned_out(tmp_path: Path, config: Path, serial: dict[str, str]) -> None:
    """The A/A and the broken candidate measured at once as Ray tasks on a local head
    (two CPUs, one per task), in a private network namespace (Ray's servers bind every
    interface; there they are reachable from this machine only), logged to an MLflow
    server on PostgreSQL with proxied artifacts in the same namespace."""
    from servers import mlflow_server, postgres, private_network

    from workbench.mechanisms.paths import engine_python
    from workbench.serve.engine import free_port

    ray = str(engine_python().with_name("ray"))
    raytmp = Path(tempfile.mkdtemp(prefix="wb-ray-"))  # Ray's socket paths must stay short
    port = free_port()
    with private_network(f"wb-sweep-{os.getpid()}") as inside, \
            postgres(netns=inside[-1]) as pg, \
            mlflow_server(pg.uri(), tmp_path / "shared" / "artifacts", netns=inside[-1]
                          ) as (url, _):
        env = {**os.environ, "RAY_TMPDIR": str(raytmp), "MLFLOW_TRACKING_URI": url}
        subprocess.run(inside + [ray, "start", "--head", "--port", str(port), "--num-cpus",
                                 "2", "--num-gpus", "0", "--include-dashboard", "false",
                                 "--disable-usage-stats"],
                       env=env, check=True, capture_output=True, timeout=180)
        try:
            run = subprocess.run(
                inside + [sys.executable, "-m", "workbench.cli", "sweep", "--config",
                          str(config), "--candidate", "same", "--candidate", "broken",
                          "--runs-dir", "runs", "--ray-address", f"127.0.0.1:{port}",
                          "--remeasure"],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
        finally:
            subprocess.run(inside + [ray, "stop", "--force"], env=env, capture_output=True,
                           timeout=120)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out
        assert out.count("measured in a Ray task") == 2
        record = json.loads((newest_sweep(tmp_path) / "sweep.json").read_text())
        from workbench.sweep.schema import validate_sweep

        validate_sweep(record)
        assert record["fanned_out"] == f"the Ray cluster at 127.0.0.1:{port}"
        rows = {r["candidate"]: r for r in record["rows"]}
        assert {n: r["decision"] for n, r in rows.items()} == {
            n: serial[n] for n in ("same", "broken")}
        assert all(r["measured_now"] for r in rows.values())
        tasks = [rows[n]["ray_task"] for n in ("same", "broken")]
        assert max(t["started_at"] for t in tasks) < min(t["ended_at"] for t in tasks), \
            "the two candidates' tasks did not run at the same time"
        assert record["recommendation"]["candidate"] == "same"

        check = subprocess.run(
            inside + [sys.executable, str(Path(__file__).with_name("mlflow_check.py")), url,
                      "sweep", record["mlflow"]["run_id"], "tiny-llama", str(pg.port)],
            env=env, capture_output=True, text=True, timeout=300)
        assert check.returncode == 0, check.stderr
        found = json.loads(check.stdout)
    assert found["children"] == {"same": "promote", "broken": "reject"}
    assert found["nested"] == {"same": ["baseline", "candidate"],
                               "broken": ["baseline", "candidate"]}
    assert {"sweep.json", "sweep.md", "pareto.png"} <= set(found["parent_artifacts"])
    assert "decision.json" in found["child_artifacts"]["same"]
    assert found["artifact_uri"].startswith("mlflow-artifacts:")  # proxied by the server
    assert found["recommended"].get("candidate") == "same"
    assert {t.get("decision") for t in found["versions"].values()} >= {"promote", "reject"}
    assert found["postgres_runs"] >= 7  # parent, two children, a nested run per model each
    assert found["postgres_versions"] >= 2
    stored = {p.name for p in (tmp_path / "shared" / "artifacts").rglob("*") if p.is_file()}
    assert {"sweep.json", "decision.json"} <= stored  # the server stored what it was sent
    assert not find_pids("raylet") and not find_pids("gcs_server")
    assert not find_pids(ENGINE)
    shutil.rmtree(raytmp, ignore_errors=True)
