"""The README's main job on the embedded default model (SmolLM2-135M-Instruct, int4).

Slow (several minutes on 2 cores, cold), so it runs only with `pytest -m e2e`.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_main_job_decides_and_records(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "workbench.cli", "evaluate", "--candidate",
                             "int4"], cwd=tmp_path, capture_output=True, text=True, timeout=3600)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    record = json.loads(next((tmp_path / "runs").glob("*-int4/decision.json")).read_text())
    assert record["decision"] in ("promote", "reject", "inconclusive")
    assert record["quantization"]["recipe"]["group_size"] == 64
    # int4 on this model measurably raises held-out perplexity (docs/benchmarks.md)
    assert record["quantization"]["fidelity"]["perplexity_ratio"] > 1.05
    assert record["quantization"]["served_format"]["label"] == "W4A16"
    assert record["suites"]["arithmetic"]["baseline"]["n"] == 120
    assert "decision:" in result.stdout.lower()
