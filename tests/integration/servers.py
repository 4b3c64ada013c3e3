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

from workbench.mechanisms.host import fast_dtype
from workbench.mechanisms.paths import engine_python, offline_env
from workbench.serve.engine import SERVE_MODULE, free_port


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

@dataclass(frozen=True)
class Endpoint:
    """One vLLM endpoint to start: its model, served name, log and optional key."""

    model: Path
    served: str
    log: Path
    api_key: str | None = None


def _launch(ep: Endpoint) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [str(engine_python()), "-m", SERVE_MODULE,
           "--model", str(ep.model), "--served-model-name", ep.served, "--host", "127.0.0.1",
           "--port", str(port), "--max-model-len", "512", "--dtype", fast_dtype("cpu"),
           "--enforce-eager"]
    env = {**offline_env(), "VLLM_CPU_KVCACHE_SPACE": "1"}
    if ep.api_key:
        env["VLLM_API_KEY"] = ep.api_key  # vLLM reads it like --api-key; keeps it off argv
    with ep.log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    return proc, f"http://127.0.0.1:{port}"


@contextmanager
def vllm_endpoints(*endpoints: Endpoint) -> Iterator[list[str]]:
    """vLLM's OpenAI-compatible servers on 127.0.0.1, as a team deploys them (optionally
    behind --api-key), in the float type this CPU computes fast in (bf16 is emulated
    without AVX512_BF16 or AMX: docs/benchmarks.md, "Compute dtype"); started together, so
    their starts overlap (most of a start is one process waiting on another), each waited
    for until healthy; every one stopped afterwards."""
    started: list[tuple[subprocess.Popen[bytes], str, Path]] = []
    try:
        for ep in endpoints:
            proc, url = _launch(ep)
            started.append((proc, url, ep.log))
        for proc, url, log in started:
            _wait(lambda url=url: httpx.get(url + "/health", timeout=2).status_code == 200,
                  "vLLM endpoint", proc, timeout=600, log=log)
        yield [url for _, url, _ in started]
    finally:
        for proc, _, _ in started:
            stop(proc, grace_s=20)


# ---- a vLLM endpoint whose /metrics read as vLLM's CUDA build renders them ---------------

# CacheConfig fields the engine fills in after it sized the KV cache, on any platform
# (vllm/v1/engine/core_client.py `_apply_ready_response`, 0.32); the rest stay as the CUDA
# platform leaves them (vllm/platforms/cuda.py sets none of them: kv_cache_memory_bytes is
# None unless a user sets it, where the CPU platform fills it from VLLM_CPU_KVCACHE_SPACE).
ENGINE_FILLED = ("block_size", "cache_dtype", "num_gpu_blocks", "kv_cache_size_tokens",
                 "kv_cache_max_concurrency", "effective_attention_block_size",
                 "hash_block_size", "enable_prefix_caching")


def cuda_cache_config_info(cpu_labels: dict[str, str]) -> str:
    """The `vllm:cache_config_info` exposition a CUDA engine of the same size would serve:
    vLLM's own CacheConfig at its defaults, the engine-filled fields copied from the CPU
    server, rendered by vLLM's metrics_info() and prometheus_client as
    PrometheusStatLogger.log_metrics_info does (vllm/v1/metrics/loggers.py)."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest
    from vllm.config import CacheConfig

    config = CacheConfig(block_size=int(cpu_labels["block_size"]),
                         cache_dtype=cpu_labels["cache_dtype"])
    for key in ENGINE_FILLED[2:]:
        if cpu_labels.get(key, "None") != "None":
            setattr(config, key, _label_value(cpu_labels[key]))
    info = {**config.metrics_info(), "engine": cpu_labels.get("engine", "0")}
    registry = CollectorRegistry()
    gauge = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                  labelnames=list(info), registry=registry)
    gauge.labels(**info).set(1)
    return generate_latest(registry).decode()


def _label_value(text: str) -> bool | int | float:
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        return float(text)


def as_cuda_renders(metrics: str) -> str:
    """The server's /metrics text with its cache_config_info replaced by the CUDA one."""
    from prometheus_client.parser import text_string_to_metric_families

    family = next(f for f in text_string_to_metric_families(metrics)
                  if f.name == "vllm:cache_config_info")
    kept = [line for line in metrics.splitlines(keepends=True)
            if "vllm:cache_config_info" not in line]
    return "".join(kept) + cuda_cache_config_info(dict(family.samples[0].labels))


@contextmanager
def cuda_metrics_proxy(upstream: str) -> Iterator[str]:
    """A loopback HTTP proxy in front of a vLLM server that passes every request through
    (streamed responses chunk by chunk) and rewrites only /metrics (as_cuda_renders)."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the body ends when the connection closes

        def _relay(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "content-length", "connection")}
            with httpx.Client(timeout=None) as client, client.stream(
                    self.command, upstream + self.path, content=body, headers=headers) as r:
                self.send_response(r.status_code)
                for key, value in r.headers.items():
                    if key.lower() not in ("content-length", "transfer-encoding",
                                           "connection", "content-encoding"):
                        self.send_header(key, value)
                self.end_headers()
                if self.path.startswith("/metrics"):
                    self.wfile.write(as_cuda_renders(r.read().decode()).encode())
                    return
                for chunk in r.iter_bytes():
                    self.wfile.write(chunk)
                    self.wfile.flush()

        do_GET = do_POST = do_DELETE = _relay

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
