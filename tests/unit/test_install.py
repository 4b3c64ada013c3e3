"""The workbench as its users get it: the wheel `pip install .` builds carries the shipped
suites, configs, gate policies and schemas, and the installed package validates and
describes the shipped default config from an empty folder, with no checkout in sight."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(REPO)], check=True,
                   capture_output=True)
    return next(out.glob("quant_workbench-*.whl"))


def test_the_wheel_carries_the_shipped_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ("configs/default.yaml", "configs/gpu.yaml", "configs/gates/default.yaml",
                    "configs/gates/strict.yaml", "configs/gates/gpu.yaml",
                    "eval_suites/quality/arithmetic/suite.yaml",
                    "calibration_data/heldout.jsonl", "calibration_data/LICENSE"):
        assert f"workbench/shipped/{shipped}" in names
    for version in range(2, 8):  # every record schema released: `gate` reads them all
        assert f"workbench/record/decision-v{version}.schema.json" in names
    assert "workbench/sweep/sweep-v4.schema.json" in names
    suites = {n.split("/")[4] for n in names if n.endswith("/suite.yaml")}
    assert len(suites) >= 12 and not any("__pycache__" in n for n in names)


def test_the_installed_package_runs_from_an_empty_folder(wheel: Path, tmp_path: Path) -> None:
    target, empty = tmp_path / "site", tmp_path / "empty"
    empty.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)

    def workbench(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "workbench.cli", *args], cwd=empty,
                              env={**_env(), "PYTHONPATH": str(target)}, text=True,
                              capture_output=True, timeout=120)

    where = subprocess.run([sys.executable, "-c", "import workbench; print(workbench.__file__)"],
                           cwd=empty, env={**_env(), "PYTHONPATH": str(target)}, text=True,
                           capture_output=True, check=True).stdout
    assert where.startswith(str(target))  # the installed copy, not this checkout
    assert workbench("--help").returncode == 0
    result = workbench("validate")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok" in result.stdout
    assert list(empty.iterdir()) == []  # validate writes nothing


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
