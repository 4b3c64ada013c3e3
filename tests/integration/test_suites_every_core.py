"""The suites on every core, through the real engine (issue 55): the tiny model's A/A with
`engine.suite_binding: every-core` runs each model's suites in an engine session that
vLLM binds to every core and its load test in one on vLLM's own binding (each session's
binding read from vLLM's own log), the record says so, and the greedy answers are the ones
vLLM's binding gives. The tiny model is below the size where `auto` picks every core, so
the config names it. Slow tier: six engine starts."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from workbench.mechanisms.jsonl import jsonl_lines
from workbench.serve.engine import SERVE_MODULE

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
model: {{name: tiny-binding, path: {model}}}
candidates:
  aa: {{recipe: none}}
calibration:
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
  num_samples: 8
  seq_len: 64
engine: {{max_model_len: 512, enforce_eager: true, kv_cache_space_gib: 1, startup_timeout_s: 600,
         request_timeout_s: 60, suite_binding: {binding}}}
suites: [arithmetic]
profile: smoke
load:
  profile: tiny
  rounds: 1
  profiles:
    tiny: {{concurrency: [2], num_prompts: 6, prompt_tokens: 32, output_tokens: 32,
           warmup_prompts: 1}}
gates: gates.yaml
tracking: {{experiment: binding}}
"""
GATES = "quality:\n  - {suite: arithmetic, max_drop: 0.5}\n"


def _run(tmp_path: Path, model: Path, binding: str, workbench) -> Path:
    cfg = tmp_path / f"{binding}.yaml"
    cfg.write_text(CONFIG.format(model=model, repo=REPO, binding=binding))
    (tmp_path / "gates.yaml").write_text(GATES)
    runs = tmp_path / f"runs-{binding}"
    result = workbench("evaluate", "--candidate", "aa", "--config", str(cfg),
                       "--runs-dir", str(runs), cwd=tmp_path)
    # a random model answers no arithmetic: its A/A cannot be promoted on it, only judged
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    [run_dir] = [d for d in runs.iterdir() if d.is_dir()]
    return run_dir


def _omp_binding(log: Path) -> tuple[int, list[int]]:
    """The cores vLLM reserved and those its worker was bound to, as its log states them
    (vllm/utils/ompmultiprocessing.py's "OpenMP thread binding info")."""
    text = log.read_text(errors="replace")
    reserved = re.search(r"reserve_cpu_num=(\d+)", text)
    cores = re.search(r"core ids=\[([\d, ]*)\]", text)
    assert reserved and cores, f"no OpenMP binding lines in {log}"
    return int(reserved.group(1)), [int(c) for c in cores.group(1).split(",") if c.strip()]


def _answers(run_dir: Path, role: str) -> dict[str, str]:
    rows = (json.loads(line) for line in jsonl_lines(run_dir / role / "items-arithmetic.jsonl")
            if line.strip())
    return {row["id"]: row["response"] for row in rows}


def test_the_suites_on_every_core_answer_as_on_vllms_binding(tiny_model: Path, tmp_path: Path,
                                                             workbench, engine_pids) -> None:
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        pytest.skip("one core: vLLM's binding leaves nothing idle")
    every = _run(tmp_path, tiny_model, "every-core", workbench)
    record = json.loads((every / "decision.json").read_text())
    assert record["decision"] != "reject"
    [same] = [g for g in record["gates"] if g["gate"] == "comparability"]
    assert same["status"] == "pass" and "suites' cores" in same["detail"]
    assert record["device"]["suite_binding"] == "every-core"
    assert "on every core" in (every / "decision.md").read_text()
    for role in ("baseline", "candidate"):
        # the suites' session bound to every core, the load test's to all but one
        assert _omp_binding(every / role / "server-every-core.log") == (0, sorted(
            os.sched_getaffinity(0)))
        reserved, bound = _omp_binding(every / role / "server.log")
        assert reserved == 1 and len(bound) == cores - 1
        assert record["load"][role]["levels"], f"{role}'s load test was not measured"
    assert not engine_pids(SERVE_MODULE)

    own = _run(tmp_path, tiny_model, "vllm", workbench)  # the baseline measured again:
    assert json.loads((own / "decision.json").read_text())["device"]["suite_binding"] == "vllm"
    assert not (own / "baseline" / "server-every-core.log").exists()
    # ...its key holds the binding, and its greedy answers are the same on either
    assert _answers(own, "baseline") == _answers(every, "baseline")
    assert _answers(every, "candidate") == _answers(every, "baseline")
