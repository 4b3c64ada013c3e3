"""Open the MLflow UI in headless Chromium and read what its run-comparison page shows."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import httpx
import pytest

from workbench.serve.engine import free_port

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("no Chromium: scripts/setup.sh installs Debian's chromium as root")
        pytest.skip("no Chromium (scripts/setup.sh installs Debian's chromium when root)")
    return found


def compare_page_dom(db: Path, experiment_id: str, run_ids: list[str]) -> str:
    """The rendered DOM of the UI's run-comparison page for these runs."""
    query = urllib.parse.urlencode({"runs": json.dumps(run_ids),
                                    "experiments": json.dumps([experiment_id])})
    return ui_dom(db, [f"#/compare-runs?{query}"])[0]


def ui_dom(db: Path, pages: list[str]) -> list[str]:
    """The rendered DOM of each UI page (a URL fragment such as #/experiments/1), from one
    `mlflow server` over the store, on loopback, stopped afterwards."""
    browser = chromium()
    port = free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    server = subprocess.Popen(
        [str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{db}", "--artifacts-destination",
         str(db.parent / "mlruns")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        doms = []
        for page in pages:
            with tempfile.TemporaryDirectory() as profile:
                shown = subprocess.run(
                    [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                     "--virtual-time-budget=30000", "--dump-dom",
                     f"http://127.0.0.1:{port}/{page}"],
                    capture_output=True, text=True, timeout=180)
            doms.append(shown.stdout)
        return doms
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
