"""The README's main job on the embedded default model (SmolLM2-135M-Instruct, int4).

Slow (several minutes on 2 cores, cold), so it runs only with `pytest -m e2e`.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.mechanisms.host import cpu_vector_isa, fast_dtype

pytestmark = pytest.mark.e2e


def test_main_job_decides_and_records(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "workbench.cli", "evaluate", "--candidate",
                             "int4"], cwd=tmp_path, capture_output=True, text=True, timeout=3600)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    record = json.loads(next((tmp_path / "runs").glob("*-int4/decision.json")).read_text())
    assert record["decision"] in ("promote", "reject", "inconclusive")
    assert record["device"]["serve_dtype"] == fast_dtype("cpu")
    assert record["quantization"]["compute_dtype"] == fast_dtype("cpu")
    # int4 itself on every CPU: its recipe, its perplexity (docs/benchmarks.md)
    assert record["quantization"]["recipe"]["group_size"] == 64
    assert record["quantization"]["fidelity"]["perplexity_ratio"] > 1.05
    assert record["quantization"]["served_format"]["label"] == "W4A16"
    if cpu_vector_isa() == "avx2":  # no int4 kernel: its weights served dense, said so
        assert record["served_dense"]["format"] == "W4A16"
        assert "served dense:" in result.stdout.splitlines()[0]
        memory = [g for g in record["gates"] if g["gate"].startswith("memory:")]
        assert memory and all(g["status"] == "not_measured" for g in memory)
        assert record["decision"] != "promote"
    else:
        assert record["served_dense"] is None
    assert record["suites"]["arithmetic"]["baseline"]["n"] == 120
    assert "decision:" in result.stdout.lower()
    # the evidence a broken model cannot hide from: generation health on every generating
    # suite, the safety kinds, and greedy agreement with the baseline
    advbench = record["suites"]["advbench"]
    assert {"health_rate", "degenerate_share", "refusal_rate_healthy"} <= \
        advbench["candidate"]["metrics"].keys()
    assert "health:(pooled)" in {g["gate"] for g in record["gates"]}
    assert record["fidelity"]["heldout-text"]["agreement"]["items"] == 16
    markdown = next((tmp_path / "runs").glob("*-int4/decision.md")).read_text()
    assert "## Generation health" in markdown and "Generation agreement" in markdown
