"""Real servers the integration tests start and stop themselves, on loopback only: a
PostgreSQL from Debian's packages, an MLflow tracking server on it with proxied artifacts
(as teams deploy one), a vLLM endpoint, and private network namespaces for servers that
bind every interface (Ray's), so that even those are reachable from this machine only.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from workbench.mechanisms.paths import engine_python, offline_env
from workbench.serve.engine import free_port


def _wait(check, what: str, proc: subprocess.Popen | None = None, timeout: float = 120,
          log: Path | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            pytest.fail(f"{what} exited with {proc.returncode} while starting: {tail}")
        try:
            if check():
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.5)
    pytest.fail(f"{what} did not start within {timeout:.0f}s")


def stop(proc: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM the process group, SIGKILL what outlives the grace."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


# ---- PostgreSQL ---------------------------------------------------------------------------

def postgres_bindir() -> Path | None:
    """Debian's PostgreSQL binaries (`pg_config --bindir`), or None when not installed."""
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        found = Path(out.stdout.strip())
        if (found / "postgres").exists():
            return found
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    return candidates[-1].parent if candidates else None


def _as_postgres(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as Debian's postgres user."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@dataclass
class Postgres:
    port: int
    folder: Path
    proc: subprocess.Popen

    def uri(self, db: str = "mlflow") -> str:
        # psycopg 3 through SQLAlchemy, as MLflow's docs name it
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{db}"

    def query(self, sql: str, db: str = "mlflow") -> list[tuple]:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname={db}") as c:
            return c.execute(sql).fetchall()


@contextmanager
def postgres(netns: str | None = None) -> Iterator[Postgres]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (trust auth, fsync off: a test's data),
    with a database 'mlflow'; stopped and removed afterwards."""
    bindir = postgres_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (scripts/setup-tests.sh installs Debian's "
                    "package when run as root)")
    # not under pytest's tmp_path: its parents are root's alone, and the server runs as
    # the postgres user
    folder = Path(tempfile.mkdtemp(prefix="workbench-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    port = free_port()
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run(prefix + _as_postgres([str(bindir / "initdb"), "-D", str(folder / "data"),
                                          "-A", "trust", "-U", "postgres", "--no-sync"]),
                   check=True, capture_output=True, timeout=120)
    log = folder / "postgres.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(prefix + _as_postgres([
            str(bindir / "postgres"), "-D", str(folder / "data"), "-p", str(port),
            "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={folder}",
            "-c", "fsync=off"]), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready = prefix + [str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)]
        _wait(lambda: subprocess.run(ready, capture_output=True).returncode == 0,
              "postgres", proc, log=log)
        subprocess.run(prefix + [str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port),
                                 "-U", "postgres", "mlflow"], check=True, capture_output=True)
        yield Postgres(port, folder, proc)
    finally:
        stop(proc)
        shutil.rmtree(folder, ignore_errors=True)


# ---- MLflow tracking server ---------------------------------------------------------------

@contextmanager
def mlflow_server(backend_uri: str, artifacts: Path, port: int | None = None,
                  netns: str | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """`mlflow server` on 127.0.0.1 over the given store, serving (proxying) artifacts from
    the folder; yields its URL and process. The caller may stop it early (a lost server)."""
    port = port or free_port()
    artifacts.mkdir(parents=True, exist_ok=True)
    log = artifacts.parent / f"mlflow-server-{port}.log"
    prefix = ["ip", "netns", "exec", netns] if netns else []
    with log.open("ab") as out:
        proc = subprocess.Popen(prefix + [
            str(engine_python().with_name("mlflow")), "server", "--host", "127.0.0.1",
            "--port", str(port), "--backend-store-uri", backend_uri, "--serve-artifacts",
            "--artifacts-destination", str(artifacts), "--workers", "1"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env=offline_env())
    url = f"http://127.0.0.1:{port}"
    try:
        if netns is None:
            _wait(lambda: httpx.get(url + "/health", timeout=2).status_code == 200,
                  "mlflow server", proc, timeout=180, log=log)
        else:
            probe = prefix + ["curl", "-sf", url + "/health"]
            _wait(lambda: subprocess.run(probe, capture_output=True).returncode == 0,
                  "mlflow server", proc, timeout=180, log=log)
        yield url, proc
    finally:
        stop(proc)


# ---- network namespaces -------------------------------------------------------------------

@contextmanager
def private_network(name: str) -> Iterator[list[str]]:
    """A network namespace with only a loopback interface; yields the command prefix that
    runs a program inside it. A server there that binds every interface (Ray's GCS and
    raylet do) is still reachable from this machine only. Needs root (else skipped)."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("a private network namespace needs root and iproute2")
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        prefix = ["ip", "netns", "exec", name]
        subprocess.run(prefix + ["ip", "link", "set", "lo", "up"], check=True)
        yield prefix
    finally:
        # anything still running in it is ended with it
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                              text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", name], check=False)


# ---- a vLLM endpoint ----------------------------------------------------------------------

@contextmanager
def vllm_endpoint(model: Path, served: str, log: Path, api_key: str | None = None
                  ) -> Iterator[str]:
    """vLLM's OpenAI-compatible server on 127.0.0.1, as a team deploys one (optionally
    behind --api-key); stopped afterwards."""
    port = free_port()
    cmd = [str(engine_python()), "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(model), "--served-model-name", served, "--host", "127.0.0.1",
           "--port", str(port), "--max-model-len", "512", "--dtype", "bfloat16",
           "--enforce-eager"]
    env = {**offline_env(), "VLLM_CPU_KVCACHE_SPACE": "1"}
    if api_key:
        env["VLLM_API_KEY"] = api_key  # vLLM reads it like --api-key; keeps it off argv
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: httpx.get(url + "/health", timeout=2).status_code == 200,
              "vLLM endpoint", proc, timeout=600, log=log)
        yield url
    finally:
        stop(proc, grace_s=20)
