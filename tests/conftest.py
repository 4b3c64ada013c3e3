"""Shared fixtures. Every test gets its own MLflow store and run folder; the heavy cache
(environments, converted model, artifacts) is the machine's, as scripts/setup.sh left it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """e2e tests run only when asked for with -m e2e (they take many minutes)."""
    if "e2e" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="e2e: run with `pytest -m e2e` (see README)")
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(skip)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
